from benchgate.cli import main

main()
