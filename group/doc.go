// Package group forms a group of processes that talk by RDMA.
//
// N processes form a group over TCP: rank 0 listens on an address and the
// others join it. Rank, size and address come from Options or from the
// environment (FromEnv: RMA_RANK, RMA_SIZE, RMA_ADDR, RMA_SECRET, or the
// variables mpirun and srun set). A shared secret authenticates every
// joiner with a mutual HMAC challenge before anything else is said, so a
// process without it learns no memory key or address. Each rank connects
// a loopback queue pair for its own memory at Join; the reliable-connected
// queue pair to another rank is made on the first call that needs it (the
// two ranks swap endpoints over their liveness connection), so a rank that
// talks to few others holds few queue pairs. The active messages of every
// peer arrive in one shared receive queue (Options.RecvBuffers), so what a
// rank pins does not grow with the group. The TCP connections stay for
// out-of-band barriers and all-gathers, used when windows are created and
// freed.
//
// Split divides a group into subgroups (MPI_Comm_split), collectively over
// the group. A subgroup reuses its parent's RDMA connections, engine and
// failure detection; it has its own out-of-band connections for its
// collectives, so that windows on it (and their creation, fences and Free)
// involve its ranks only. FabricRank translates its ranks into the ranks
// of the connections.
//
// Errors: ErrAuth (secret missing or rejected), ErrRankTaken, ErrConfig,
// and the verbs errors (verbs.ErrNoDevice, verbs.ErrNotSupported) when the
// RDMA device cannot be used. Join checks, before it opens the device,
// that the process may open the device's file read-write and that its
// locked-memory limit holds what the group registers; if not, it fails
// with a *verbs.LimitError (verbs.ErrResourceLimit) that names the limit,
// its value, what was needed and the fix.
package group
