from strongroom.cli import main

main()
