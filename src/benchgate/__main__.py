from benchgate.cli.main import main

main()
