import sys

from minisgl.router.launch import main

sys.exit(main())
