from reviewbot.cli import main

raise SystemExit(main())
