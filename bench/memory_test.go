package bench

// serverEnv, when set, makes the test binary serve a backlog instead of
// running tests (see serveBacklog).
const serverEnv = "PUBSUBFLOW_BENCH_SERVER"

func serveBacklog() int { return 0 }
