from rawgpu.tools.cli import main

raise SystemExit(main())
