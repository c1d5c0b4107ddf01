"""The pattern language (accel.pattern): each combinator, match validity, the table index.

Graphs are built op by op with GraphBuilder; every expectation names the nodes
and values a match must contain, so a wrong matcher fails on structure, not on
a count alone.
"""

from __future__ import annotations

import doctest
import itertools

import numpy as np
import pytest

import accel.pattern
from accel.backend import PatternEntry
from accel.builder import GraphBuilder
from accel.ir import Graph, Node, QuantParams, TensorType, Value
from accel.pattern import Match, MatchFailure, Pattern, PatternMatcher, is_constant, is_op, wildcard

F32 = np.float32


def weight(o: int = 4, c: int = 4, k: int = 3) -> np.ndarray:
    return np.ones((o, c, k, k), F32)


def node_of(v: Value) -> Node:
    assert v.producer is not None
    return v.producer


def ops(m: Match) -> list[str]:
    return [n.op for n in m.nodes]


def conv_chain_pattern() -> Pattern:
    """pad? -> conv -> bias? -> (relu | clip(0, ...))?"""
    conv = is_op("nn.conv2d")(is_op("nn.pad")(wildcard()).optional().named("pad"), is_constant()).named("conv")
    bias = conv.optional(lambda x: is_op("nn.bias_add")(x, is_constant()))
    return bias.optional(lambda x: is_op("nn.relu")(x) | is_op("clip")(x).has_attr({"a_min": 0.0}))


# -- leaves -------------------------------------------------------------------------


def test_wildcard_matches_inputs_constants_and_outputs_without_taking_producers():
    b = GraphBuilder(x=(2, 3))
    inner = b.op("nn.relu", b.x["x"])
    outer = b.op("nn.relu", inner)
    on_const = b.op("nn.relu", b.const(np.ones((2, 3), F32)))
    g = b.done(outer, on_const)
    p = is_op("nn.relu")(wildcard())

    m = p.match(node_of(inner), g)
    assert m is not None and m.nodes == [node_of(inner)] and m.inputs == [b.x["x"]] and m.constants == []
    m = p.match(node_of(outer), g)
    assert m is not None and m.nodes == [node_of(outer)] and m.inputs == [inner]  # the inner relu stays outside
    m = p.match(node_of(on_const), g)
    assert m is not None and m.inputs == [] and m.constants == node_of(on_const).inputs


def test_is_constant_requires_constant_data():
    b = GraphBuilder(x=(1, 4, 6, 6), w=(4, 4, 3, 3))
    by_const = b.op("nn.conv2d", b.x["x"], b.const(weight()))
    by_input = b.op("nn.conv2d", b.x["x"], b.x["w"])
    g = b.done(by_const, by_input)
    p = is_op("nn.conv2d")(wildcard(), is_constant())

    m = p.match(node_of(by_const), g)
    assert m is not None and m.inputs == [b.x["x"]] and m.constants == [node_of(by_const).inputs[1]]
    assert p.match(node_of(by_input), g) is None
    assert p.match_reason(node_of(by_input), g) == "%w is not a constant"


def test_op_pattern_names_several_ops_and_checks_input_count():
    b = GraphBuilder(x=(2, 3), y=(2, 3))
    s = b.op("add", b.x["x"], b.x["y"])
    r = b.op("sigmoid", s)
    g = b.done(r)

    for p in (is_op("add", "multiply"), is_op(("multiply", "add")), is_op(["add"])):
        m = p.match(node_of(s), g)
        assert m is not None and m.nodes == [node_of(s)] and m.inputs == [b.x["x"], b.x["y"]]
    assert is_op("nn.relu", "sigmoid")(is_op("add")).match(node_of(r), g).nodes == [node_of(s), node_of(r)]
    assert is_op("multiply").match(node_of(s), g) is None

    one_input = is_op("add")(wildcard())
    assert one_input.match(node_of(s), g) is None
    assert "has 2 inputs, the pattern expects 1" in one_input.match_reason(node_of(s), g)


# -- optional -------------------------------------------------------------------------


def test_optional_with_a_function_prefers_the_longer_form():
    b = GraphBuilder(x=(2, 3))
    r = b.op("nn.relu", b.x["x"])
    s = b.op("sigmoid", r)
    g = b.done(s)
    relu = is_op("nn.relu")(wildcard())
    p = relu.optional(lambda x: is_op("sigmoid")(x))

    assert ops(p.match(node_of(s), g)) == ["nn.relu", "sigmoid"]  # present
    assert ops(p.match(node_of(r), g)) == ["nn.relu"]  # absent: the relu alone is a valid root
    assert p.root_ops() == {"nn.relu", "sigmoid"}


def test_optional_without_a_function_makes_the_op_itself_optional():
    b = GraphBuilder(x=(1, 4, 6, 6))
    padded = b.op("nn.pad", b.x["x"], pad_width=((0, 0), (0, 0), (1, 1), (1, 1)))
    with_pad = b.op("nn.conv2d", padded, b.const(weight()))
    without = b.op("nn.conv2d", b.x["x"], b.const(weight()))
    g = b.done(with_pad, without)
    p = is_op("nn.conv2d")(is_op("nn.pad")(wildcard()).optional(), is_constant())

    m = p.match(node_of(with_pad), g)
    assert ops(m) == ["nn.pad", "nn.conv2d"] and m.inputs == [b.x["x"]]
    m = p.match(node_of(without), g)
    assert ops(m) == ["nn.conv2d"] and m.inputs == [b.x["x"]]


@pytest.mark.parametrize(
    ("pad", "bias", "act"), list(itertools.product([False, True], [False, True], [None, "relu", "clip"]))
)
def test_pad_conv_bias_activation_every_combination(pad, bias, act):
    b = GraphBuilder(x=(1, 4, 6, 6))
    y = b.x["x"]
    want = []
    if pad:
        y = b.op("nn.pad", y, pad_width=((0, 0), (0, 0), (1, 1), (1, 1)))
        want.append("nn.pad")
    y = b.op("nn.conv2d", y, b.const(weight()))
    want.append("nn.conv2d")
    if bias:
        y = b.op("nn.bias_add", y, b.const(np.zeros(4, F32)))
        want.append("nn.bias_add")
    if act == "relu":
        y = b.op("nn.relu", y)
        want.append("nn.relu")
    elif act == "clip":
        y = b.op("clip", y, a_min=0, a_max=6.0)  # 0 == 0.0: attributes compare by value
        want.append("clip")
    g = b.done(y)

    m = conv_chain_pattern().match(node_of(y), g)
    assert m is not None
    assert ops(m) == want
    assert m.nodes == g.nodes  # every node, in graph order
    assert m.root is g.nodes[-1]
    assert m.inputs == [b.x["x"]]
    assert len(m.constants) == 1 + bias
    assert m.node("conv").op == "nn.conv2d"
    assert m.node("pad").op == "nn.pad" if pad else m.value("pad") is b.x["x"]


def test_clip_activation_needs_a_zero_lower_bound():
    b = GraphBuilder(x=(1, 4, 6, 6))
    c = b.op("nn.conv2d", b.x["x"], b.const(weight()))
    y = b.op("clip", c, a_min=-1.0, a_max=6.0)
    g = b.done(y)
    p = conv_chain_pattern()
    assert p.match(node_of(y), g) is None
    assert p.match_reason(node_of(y), g) == "clip 'clip' has a_min=-1.0, expected 0.0"


# -- alternatives ---------------------------------------------------------------------


def test_alternatives_try_left_then_right():
    b = GraphBuilder(x=(1, 4, 6, 6))
    mx = b.op("nn.max_pool2d", b.x["x"], pool_size=(2, 2))
    av = b.op("nn.avg_pool2d", b.x["x"], pool_size=(2, 2))
    r = b.op("nn.relu", b.x["x"])
    g = b.done(mx, av, r)
    pool = is_op("nn.max_pool2d")(wildcard()).named("max") | is_op("nn.avg_pool2d")(wildcard()).named("avg")

    assert pool.root_ops() == {"nn.max_pool2d", "nn.avg_pool2d"}
    assert pool.match(node_of(mx), g).bindings == {"max": node_of(mx)}
    assert pool.match(node_of(av), g).bindings == {"avg": node_of(av)}
    assert pool.match(node_of(r), g) is None

    both = is_op("nn.relu")(wildcard()).named("left") | is_op("nn.relu")(wildcard()).named("right")
    assert both.match(node_of(r), g).bindings == {"left": node_of(r)}


def test_alternatives_backtrack_when_a_later_input_disagrees():
    b = GraphBuilder(a=(2, 3))
    r1 = b.op("nn.relu", b.x["a"])
    s1 = b.op("add", r1, b.x["a"])  # add(relu(a), a)
    r2 = b.op("nn.relu", b.x["a"])
    s2 = b.op("add", r2, r2)  # add(relu(a), relu(a))
    g = b.done(s1, s2)
    x = wildcard()
    p = is_op("add")(is_op("nn.relu")(x) | x, x)

    m1 = p.match(node_of(s1), g)
    assert m1 is not None and ops(m1) == ["nn.relu", "add"] and m1.inputs == [b.x["a"]]
    # relu(x) binds x = a, then the second input r2 disagrees: the right alternative (x = r2) is taken
    m2 = p.match(node_of(s2), g)
    assert m2 is not None and ops(m2) == ["add"] and m2.inputs == [r2]


# -- predicates -----------------------------------------------------------------------


def test_dtype_shape_rank_predicates():
    b = GraphBuilder(x=(1, 6, 6, 8), h=TensorType((1, 6, 6, 8), "float16"))
    r = b.op("nn.relu", b.x["x"])
    r16 = b.op("nn.relu", b.x["h"])
    g = b.done(r, r16)
    relu = is_op("nn.relu")(wildcard())

    assert relu.has_dtype("float32").match(node_of(r), g) is not None
    assert relu.has_dtype(np.float16, "float32").match(node_of(r16), g) is not None
    reason = relu.has_dtype("float32").match_reason(node_of(r16), g)
    assert reason == f"nn.relu {node_of(r16).name!r} has dtype float16, expected float32"
    assert relu.has_shape((1, None, None, 8)).match(node_of(r), g) is not None
    assert relu.has_shape([1, 6, 6, 8]).match(node_of(r), g) is not None
    assert relu.has_shape((1, None, None, 4)).match(node_of(r), g) is None
    assert relu.has_shape((1, None, 8)).match(node_of(r), g) is None  # rank differs
    assert relu.has_rank(4).match(node_of(r), g) is not None
    assert "has rank 4, expected 3" in relu.has_rank(3).match_reason(node_of(r), g)

    on_input = is_op("nn.relu")(wildcard().has_dtype("float16").has_shape((1, 6, 6, None)))
    assert on_input.match(node_of(r16), g) is not None
    assert on_input.match_reason(node_of(r), g) == "%x has dtype float32, expected float16"


def test_attr_predicate_compares_frozen_values():
    b = GraphBuilder(x=(1, 4, 9, 9))
    c = b.op("nn.conv2d", b.x["x"], b.const(weight()), strides=[2, 2], padding=(1, 1, 1, 1))
    g = b.done(c)
    conv = is_op("nn.conv2d")(wildcard(), is_constant())

    assert conv.has_attr({"strides": [2, 2], "groups": 1}).match(node_of(c), g) is not None
    assert conv.has_attr(strides=(2, 2)).match(node_of(c), g) is not None
    assert conv.has_attr({"strides": (1, 1)}).match(node_of(c), g) is None
    assert conv.has_attr(groups=2).match_reason(node_of(c), g) == "nn.conv2d 'conv2d' has groups=1, expected 2"
    assert "has no attribute 'alpha'" in conv.has_attr(alpha=0.1).match_reason(node_of(c), g)
    # attributes are a node's: a wildcard (a value) never has them
    assert is_op("nn.conv2d")(wildcard().has_attr(groups=1), is_constant()).match(node_of(c), g) is None


def test_where_sees_the_node_for_an_op_and_the_value_otherwise():
    b = GraphBuilder(x=(2, 3))
    r = b.op("nn.relu", b.x["x"])
    g = b.done(r)
    seen: list[object] = []

    def record(subject: object) -> bool:
        seen.append(subject)
        return True

    p = is_op("nn.relu")(wildcard().where(record)).where(record)
    assert p.match(node_of(r), g) is not None
    assert seen == [node_of(r), b.x["x"]]  # the op's predicate runs before its inputs are matched

    def never(subject: object) -> bool:
        return False

    assert (
        is_op("nn.relu").where(never).match_reason(node_of(r), g)
        == "nn.relu 'relu' fails the condition test_where_sees_the_node_for_an_op_and_the_value_otherwise.<locals>.never"
    )


# -- binding, validity ----------------------------------------------------------------


def test_one_wildcard_used_twice_binds_one_value():
    b = GraphBuilder(a=(2, 3), c=(2, 3))
    same = b.op("add", b.x["a"], b.x["a"])
    other = b.op("add", b.x["a"], b.x["c"])
    g = b.done(same, other)
    x = wildcard()
    p = is_op("add")(x, x)

    m = p.match(node_of(same), g)
    assert m is not None and m.inputs == [b.x["a"]]
    assert p.match(node_of(other), g) is None
    assert "used twice but would match both %a and %c" in p.match_reason(node_of(other), g)
    # two distinct wildcards match either
    assert is_op("add")(wildcard(), wildcard()).match(node_of(same), g).inputs == [b.x["a"]]
    assert is_op("add")(wildcard(), wildcard()).match(node_of(other), g).inputs == [b.x["a"], b.x["c"]]


def test_a_node_is_matched_once():
    b = GraphBuilder(a=(2, 3))
    r = b.op("nn.relu", b.x["a"])
    s = b.op("add", r, r)
    g = b.done(s)

    relu = is_op("nn.relu")(wildcard())
    m = is_op("add")(relu, relu).match(node_of(s), g)  # one pattern object: the same node, once
    assert m is not None and ops(m) == ["nn.relu", "add"] and m.inputs == [b.x["a"]]

    twice = is_op("add")(is_op("nn.relu")(wildcard()), is_op("nn.relu")(wildcard()))
    assert twice.match(node_of(s), g) is None
    assert twice.match_reason(node_of(s), g) == "nn.relu 'relu' would be matched twice"


def test_escaping_intermediate_is_refused_with_a_reason():
    b = GraphBuilder(x=(1, 4, 6, 6))
    c = b.op("nn.conv2d", b.x["x"], b.const(weight()))
    biased = b.op("nn.bias_add", c, b.const(np.zeros(4, F32)))
    y = b.op("nn.relu", biased)
    side = b.op("sigmoid", biased)
    g = b.done(y, side)
    p = conv_chain_pattern()

    failure = p.try_match(node_of(y), g)
    assert isinstance(failure, MatchFailure) and not failure
    assert failure.root is node_of(y)
    assert failure.reason == f"nn.bias_add output %{biased.name} is used outside the pattern (by sigmoid 'sigmoid')"
    # rooted at the bias_add, the same pattern is valid: the root's output may be used anywhere
    assert ops(p.match(node_of(biased), g)) == ["nn.conv2d", "nn.bias_add"]


def test_intermediate_graph_output_is_refused():
    b = GraphBuilder(x=(1, 4, 6, 6))
    c = b.op("nn.conv2d", b.x["x"], b.const(weight()))
    y = b.op("nn.relu", c)
    g = b.done(y, c)
    p = conv_chain_pattern()
    reason = p.match_reason(node_of(y), g)
    assert reason == f"nn.conv2d output %{c.name} is a graph output, so it cannot be inside the pattern"


def test_an_invalid_longer_form_falls_back_to_a_shorter_valid_one():
    b = GraphBuilder(x=(1, 4, 6, 6))
    padded = b.op("nn.pad", b.x["x"], pad_width=((0, 0), (0, 0), (1, 1), (1, 1)))
    c = b.op("nn.conv2d", padded, b.const(weight()))
    g = b.done(c, b.op("sigmoid", padded))  # the padded tensor is also read elsewhere
    m = conv_chain_pattern().match(node_of(c), g)
    assert m is not None and ops(m) == ["nn.conv2d"] and m.inputs == [padded]


def test_excluded_nodes_are_not_matched():
    b = GraphBuilder(x=(1, 4, 6, 6))
    c = b.op("nn.conv2d", b.x["x"], b.const(weight()))
    y = b.op("nn.relu", c)
    g = b.done(y)
    p = conv_chain_pattern()
    assert p.match(node_of(y), g, exclude={node_of(c)}) is None
    assert p.match_reason(node_of(y), g, exclude={node_of(c)}) == "nn.conv2d 'conv2d' is already taken"
    assert ops(p.match(node_of(c), g, exclude={node_of(y)})) == ["nn.conv2d"]


def test_the_root_must_be_taken_by_the_pattern():
    b = GraphBuilder(x=(2, 3))
    s = b.op("sigmoid", b.x["x"])
    g = b.done(s)
    maybe_relu = is_op("nn.relu")(wildcard()).optional()  # absent: matches any value, root included
    assert maybe_relu.root_ops() is None
    assert maybe_relu.match(node_of(s), g) is None
    assert maybe_relu.match_reason(node_of(s), g) == f"%{s.name} is produced by sigmoid 'sigmoid', expected nn.relu"


def test_nodes_are_in_topological_order_with_branches():
    b = GraphBuilder(a=(2, 3), c=(2, 3))
    r = b.op("nn.relu", b.x["a"])
    s = b.op("sigmoid", b.x["c"])
    t = b.op("tanh", r)
    y = b.op("add", t, s)
    g = b.done(y)
    p = is_op("add")(is_op("tanh")(is_op("nn.relu")(wildcard())), is_op("sigmoid")(wildcard()))
    m = p.match(node_of(y), g)
    assert m is not None
    assert ops(m) == ["nn.relu", "tanh", "sigmoid", "add"]
    assert m.inputs == [b.x["a"], b.x["c"]]
    position = {id(n): i for i, n in enumerate(m.nodes)}
    for n in m.nodes:
        for v in n.inputs:
            if v.producer is not None and id(v.producer) in position:
                assert position[id(v.producer)] < position[id(n)]


def test_match_accessors():
    b = GraphBuilder(x=(1, 4, 6, 6))
    c = b.op("nn.conv2d", b.x["x"], b.const(weight()))
    g = b.done(c)
    m = is_op("nn.conv2d")(wildcard().named("data"), is_constant().named("w")).named("conv").match(node_of(c), g)
    assert m is not None
    assert m.node("conv") is node_of(c) and m.value("conv") is c and m.outputs == [c]
    assert m.value("data") is b.x["x"] and m.value("w").const is not None
    with pytest.raises(TypeError, match="not an op node"):
        m.node("data")
    with pytest.raises(KeyError, match="labels: conv, data, w"):
        m.node("bias")


# -- quantized ---------------------------------------------------------------------------


def qconv_graph(out_dtype: str, with_bias: bool) -> tuple[Graph, Value]:
    rng = np.random.default_rng(3)
    x_type = TensorType((1, 3, 8, 8), "uint8", QuantParams(0.02, 128))
    b = GraphBuilder(x=x_type)
    w = b.const(rng.integers(0, 255, (4, 3, 3, 3)).astype(np.uint8), QuantParams(0.01, 120))
    acc = b.op("qnn.conv2d", b.x["x"], w, padding=(1, 1, 1, 1))
    if with_bias:
        acc = b.op("nn.bias_add", acc, b.const(rng.integers(-500, 500, 4).astype(np.int32)))
    zp = 10 if out_dtype == "uint8" else -5
    y = b.op("qnn.requantize", acc, out_scale=0.05, out_zero_point=zp, out_dtype=out_dtype)
    return b.done(y), y


def qconv_pattern() -> Pattern:
    conv = is_op("qnn.conv2d")(wildcard().has_dtype("uint8", "int8"), is_constant()).has_dtype("int32").named("conv")
    bias = conv.optional(lambda x: is_op("nn.bias_add")(x, is_constant()))
    return is_op("qnn.requantize")(bias).has_dtype("uint8").named("out")


@pytest.mark.parametrize("with_bias", [False, True])
def test_qnn_conv2d_requantize(with_bias):
    g, y = qconv_graph("uint8", with_bias)
    m = qconv_pattern().match(node_of(y), g)
    assert m is not None
    assert ops(m) == ["qnn.conv2d", *(["nn.bias_add"] if with_bias else []), "qnn.requantize"]
    assert m.node("conv").attrs["padding"] == (1, 1, 1, 1)
    assert m.value("out").type.quant == QuantParams(0.05, 10)
    assert [v.name for v in m.inputs] == ["x"]
    assert len(m.constants) == 1 + with_bias

    g8, y8 = qconv_graph("int8", with_bias)
    assert qconv_pattern().match_reason(node_of(y8), g8) == "qnn.requantize 'requantize' has dtype int8, expected uint8"


# -- tables -------------------------------------------------------------------------------


def test_matcher_indexes_patterns_by_root_op():
    b = GraphBuilder(x=(1, 4, 6, 6))
    c = b.op("nn.conv2d", b.x["x"], b.const(weight()))
    r = b.op("nn.relu", c)
    s = b.op("sigmoid", r)
    g = b.done(s)
    chain = conv_chain_pattern()
    relu = is_op("nn.relu")(wildcard())
    matcher = PatternMatcher([("conv", chain), ("relu", relu), ("relu_of_conv", is_op("nn.relu")(is_op("nn.conv2d")))])

    assert matcher.ops == {"nn.conv2d", "nn.bias_add", "nn.relu", "clip"}
    assert matcher.candidates(node_of(s)) == ()
    assert matcher.match(node_of(s), g) == []
    assert [k for k, _ in matcher.candidates(node_of(c))] == ["conv"]
    assert [k for k, _ in matcher.candidates(node_of(r))] == ["conv", "relu", "relu_of_conv"]

    found = matcher.match(node_of(r), g)
    assert [k for k, _ in found] == ["conv", "relu", "relu_of_conv"]
    assert [ops(m) for _, m in found] == [["nn.conv2d", "nn.relu"], ["nn.relu"], ["nn.conv2d", "nn.relu"]]
    key, first = matcher.first(node_of(r), g)
    assert key == "conv" and first.root is node_of(r)
    assert matcher.first(node_of(r), g, exclude={node_of(c)})[0] == "relu"

    tried = dict(matcher.try_all(node_of(r), g, exclude={node_of(c)}))
    assert isinstance(tried["relu"], Match)
    assert tried["conv"].reason == tried["relu_of_conv"].reason == "nn.conv2d 'conv2d' is already taken"


def test_matcher_accepts_pattern_entries():
    entry = PatternEntry("conv", conv_chain_pattern())
    matcher = PatternMatcher([entry])
    b = GraphBuilder(x=(1, 4, 6, 6))
    c = b.op("nn.conv2d", b.x["x"], b.const(weight()))
    g = b.done(c)
    assert matcher.first(node_of(c), g)[0] is entry
    assert len(matcher) == 1


def test_matcher_refuses_patterns_it_cannot_index():
    with pytest.raises(ValueError, match="could match at any node"):
        PatternMatcher([("any", wildcard())])
    with pytest.raises(ValueError, match="could match at any node"):
        PatternMatcher([("maybe", is_op("nn.relu")(wildcard()).optional())])
    with pytest.raises(ValueError, match="can never match"):
        PatternMatcher([("const", is_constant())])
    with pytest.raises(ValueError, match=r"unknown op\(s\) nn.conv2D"):
        PatternMatcher([("typo", is_op("nn.conv2D")(wildcard(), is_constant()))])
    with pytest.raises(TypeError, match="not a Pattern"):
        PatternMatcher([("bad", "nn.relu")])


def test_long_chain():
    n = 10_000
    b = GraphBuilder(x=(4,))
    y = b.x["x"]
    for _ in range(n):
        y = b.op("nn.relu", y)
    g = b.done(y)
    pair = is_op("nn.relu")(is_op("nn.relu")(wildcard()))
    matcher = PatternMatcher([("pair", pair), ("one", is_op("nn.relu")(wildcard()))])

    first = [matcher.first(node, g) for node in g.nodes]
    assert first[0][0] == "one" and first[0][1].inputs == [b.x["x"]]
    for i in range(1, n):
        key, m = first[i]
        assert (
            key == "pair"
            and m.nodes == g.nodes[i - 1 : i + 1]
            and m.inputs == [g.nodes[i - 2].output if i > 1 else b.x["x"]]
        )


# -- construction, printing -----------------------------------------------------------


def test_patterns_are_immutable_and_misuse_is_refused():
    p = is_op("nn.relu")
    called = p(wildcard())
    assert called is not p and repr(p) == "nn.relu" and repr(called) == "nn.relu(*)"
    with pytest.raises(AttributeError, match="immutable"):
        p._label = "x"  # type: ignore[misc]
    with pytest.raises(TypeError, match="already has its input patterns"):
        called(wildcard())
    with pytest.raises(TypeError, match="must be a Pattern"):
        is_op("add")(wildcard(), "x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="takes a callable"):
        p.where(True)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="returned int"):
        p.optional(lambda x: 1)  # type: ignore[arg-type,return-value]
    with pytest.raises(TypeError, match="optional\\(\\) without a function"):
        wildcard().optional()
    with pytest.raises(TypeError, match="give the op its input patterns first"):
        p.optional()
    with pytest.raises(ValueError, match=r"float128|not supported|unknown"):
        p.has_dtype("float128")
    with pytest.raises(TypeError, match="has_rank"):
        p.has_rank(-1)
    with pytest.raises(TypeError):
        is_op()
    with pytest.raises(TypeError):
        wildcard() | "nn.relu"  # type: ignore[operator]


def test_repr_reads_as_a_chain():
    assert repr(conv_chain_pattern()) == (
        "nn.pad?(*)@pad -> nn.conv2d(.., const)@conv -> nn.bias_add?(.., const) -> (nn.relu(..) | clip(..)[a_min=0.0])?"
    )
    assert repr(is_op("nn.max_pool2d")(wildcard()) | is_op("nn.avg_pool2d")(wildcard())) == (
        "(nn.max_pool2d(*) | nn.avg_pool2d(*))"
    )
    assert repr(
        is_op("qnn.conv2d", "nn.conv2d")(wildcard().has_shape((1, None)), is_constant()).has_attr(groups=1)
    ) == ("(qnn.conv2d|nn.conv2d)(*[shape=[1, ?]], const)[groups=1]")


def test_module_docstring_example_runs():
    result = doctest.testmod(accel.pattern)
    assert result.attempted > 5 and result.failed == 0


def test_a_match_is_only_skipped_where_the_search_finds_none():
    """Pattern.match passes over a node when the ops around it rule a match out (Pattern._could),
    without the search; on random chains of these ops it finds exactly what the search finds, and
    the search (try_match) still says why where it skipped."""
    rng = np.random.default_rng(7)
    unary = ["nn.relu", "nn.pad", "sigmoid", "nn.bias_add", "nn.conv2d", "clip"]
    shared = wildcard()
    patterns = [
        conv_chain_pattern(),
        is_op("add")(is_op("nn.relu")(shared), shared),  # (one value at both inputs)
        is_op("add")(is_op("nn.relu", "sigmoid")(wildcard()), is_op("nn.conv2d")(wildcard(), is_constant())),
        is_op("sigmoid")(is_op("nn.pad")(wildcard()).optional()),
        is_op("nn.relu")(is_op("nn.relu")(is_op("nn.relu")(is_op("nn.relu")(wildcard())))),  # deeper than the look
    ]
    searched = skipped = 0
    for _ in range(30):
        b = GraphBuilder(x=(1, 4, 6, 6))
        values = [b.x["x"]]
        for _ in range(12):
            op = str(rng.choice([*unary, "add"]))
            x = values[int(rng.integers(len(values)))]
            if op == "add":
                y = b.op("add", x, values[int(rng.integers(len(values)))])
            elif op == "nn.pad":  # (back to 6x6 through a 3x3 conv, or a sigmoid and a 3x3 pool)
                padded = b.op("nn.pad", x, pad_width=((0, 0), (0, 0), (1, 1), (1, 1)))
                if rng.integers(2):
                    y = b.op("nn.conv2d", padded, b.const(weight(k=3)))
                else:
                    y = b.op("nn.max_pool2d", b.op("sigmoid", padded), pool_size=(3, 3))
            elif op == "nn.conv2d":
                y = b.op("nn.conv2d", x, b.const(weight(k=1)))
            elif op == "nn.bias_add":
                y = b.op("nn.bias_add", x, b.const(np.zeros(4, F32)))
            elif op == "clip":
                y = b.op("clip", x, a_min=0.0, a_max=6.0)
            else:
                y = b.op(op, x)
            values.append(y)
        g = b.done(values[-1], *values[1:-1])
        for node in g.nodes:
            for p in patterns:
                if node.op not in (p.root_ops() or ()):
                    continue
                found = p.match(node, g)
                full = p.try_match(node, g)
                assert (found is None) == isinstance(full, MatchFailure)
                if found is not None:
                    assert isinstance(full, Match) and found.nodes == full.nodes
                if p._could(node.outputs[0], accel.pattern._LOOK_AHEAD):
                    searched += 1
                else:
                    skipped += 1
                    assert isinstance(full, MatchFailure) and full.reason
    assert searched and skipped  # (both paths were taken)
