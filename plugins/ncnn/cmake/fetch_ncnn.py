"""Fetch the pinned ncnn source distribution from the package index pip is configured with.

``pip download ncnn --no-binary :all:`` cannot do it: ncnn's setup.py stamps the
day's date as its version, so the metadata never matches the file name. This
reads the index URLs pip would use (``PIP_INDEX_URL`` / ``PIP_EXTRA_INDEX_URL``,
else ``pip config list``'s ``index-url`` / ``extra-index-url``, else the public
index), finds ``ncnn-<version>.tar.gz`` on each index's simple page for ncnn, and
keeps the file only when its sha256 is the pinned one.

    python fetch_ncnn.py VERSION SHA256 DEST_FILE
"""

from __future__ import annotations

import hashlib
import os
import re
import ssl
import subprocess
import sys
import urllib.parse
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

DEFAULT_INDEX = "https://pypi.org/simple"


def pip_config() -> dict[str, str]:
    """``pip config list`` as {key: value} (empty when pip is not there)."""
    try:
        out = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    config = {}
    for line in out.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            config[key.strip()] = value.strip().strip("'\"")
    return config


def setting(config: dict[str, str], name: str) -> str | None:
    """A pip setting: its environment variable first, then any section of pip's configuration."""
    env = os.environ.get("PIP_" + name.upper().replace("-", "_"))
    if env:
        return env
    for key, value in config.items():
        if key.rpartition(".")[2] == name:
            return value
    return None


def index_urls() -> list[str]:
    config = pip_config()
    urls = [setting(config, "index-url") or DEFAULT_INDEX]
    urls += (setting(config, "extra-index-url") or "").split()
    return [u.rstrip("/") for u in urls if u]


def ssl_context() -> ssl.SSLContext:
    cafile = setting(pip_config(), "cert")
    return ssl.create_default_context(cafile=cafile if cafile and Path(cafile).exists() else None)


class Links(HTMLParser):
    """The href of every anchor of a simple page."""

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.hrefs += [v for k, v in attrs if k == "href" and v]


def read(url: str, context: ssl.SSLContext) -> bytes:
    request = urllib.request.Request(url, headers={"Accept": "text/html"})
    with urllib.request.urlopen(request, timeout=120, context=context) as response:
        return response.read()


def fetch(version: str, sha256: str, dest: Path) -> str:
    """Write the sdist to ``dest``; returns the page it came from. Raises SystemExit saying what failed."""
    name = f"ncnn-{version}.tar.gz"
    context = ssl_context()
    tried = []
    for index in index_urls():
        page = f"{index}/ncnn/"
        try:
            parser = Links()
            parser.feed(read(page, context).decode("utf-8", "replace"))
        except (OSError, ValueError) as e:
            tried.append(f"{page}: {e}")
            continue
        for href in parser.hrefs:
            url = urllib.parse.urljoin(page, href)
            if urllib.parse.unquote(urllib.parse.urlsplit(url).path).rpartition("/")[2] != name:
                continue
            data = read(url.partition("#")[0], context)
            got = hashlib.sha256(data).hexdigest()
            if got != sha256:
                raise SystemExit(f"accel-ncnn: {name} from {page} has sha256 {got}, expected {sha256}")
            dest.parent.mkdir(parents=True, exist_ok=True)
            part = dest.with_suffix(".part")
            part.write_bytes(data)
            part.replace(dest)
            return page
        tried.append(f"{page}: no {name}")
    raise SystemExit("accel-ncnn: cannot fetch " + name + "; tried " + "; ".join(tried))


def main() -> None:
    if len(sys.argv) != 4 or not re.fullmatch(r"[0-9a-f]{64}", sys.argv[2]):
        raise SystemExit("usage: fetch_ncnn.py VERSION SHA256 DEST_FILE")
    page = fetch(sys.argv[1], sys.argv[2], Path(sys.argv[3]))
    print(f"accel-ncnn: fetched ncnn {sys.argv[1]} from {page} (sha256 checked)")


if __name__ == "__main__":
    main()
