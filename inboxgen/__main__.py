from inboxgen.cli import main

raise SystemExit(main())
