from agent_worker.main import exit_process, main

if __name__ == "__main__":
    exit_process(main())
