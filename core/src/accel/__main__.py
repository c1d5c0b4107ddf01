from accel.cli import main

main()
