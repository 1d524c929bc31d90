import sys

from agent_worker.main import main

if __name__ == "__main__":
    sys.exit(main())
