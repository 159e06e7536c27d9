module hangar/sandbox-agent

go 1.19
