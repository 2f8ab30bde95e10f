// Package group forms a group of processes that talk by RDMA.
//
// N processes form a group over TCP: rank 0 listens on an address and the
// others join it. Rank, size and address come from Options or from the
// environment (FromEnv: RMA_RANK, RMA_SIZE, RMA_ADDR, RMA_SECRET; rank and
// size may come from the variables mpirun and srun set instead). A shared secret authenticates every
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
// A member is reported lost (ErrPeerLost) on evidence of its death only:
// its liveness connection closed by its kernel (its process died), its
// RDMA connection failing and failing again to be re-established within
// about twice the peer timeout, or no answer for a peer timeout to an RDMA
// read after its liveness connection broke otherwise (a keep-alive timeout
// on a lossy or cut wire is not a death: the lower rank of the pair dials
// it again). A lossy or slow wire is not one either: the transport resends
// what was lost after an ACK timeout set from the liveness connection's
// measured round trip, without end on Soft-RoCE, and a connection whose
// transport gives up anyway (hardware retries 7 times) is re-established.
// A whole host's death is so found within about four peer timeouts.
//
// Split divides a group into subgroups (MPI_Comm_split), collectively over
// the group. A subgroup reuses its parent's RDMA connections, engine and
// failure detection; it has its own out-of-band connections for its
// collectives, so that windows on it (and their creation, fences and Free)
// involve its ranks only.
//
// Errors: ErrAuth (secret missing or rejected), ErrRankTaken, ErrConfig,
// ErrPeerLost (a member lost: collectives, Split included, fail with it at
// once if one is known lost and as soon as one is found lost while they
// run, a subgroup's when one of its ranks is), and the verbs errors
// (verbs.ErrNoDevice, verbs.ErrNotSupported) when the RDMA device cannot
// be used. Join checks, before it opens the device,
// that the process may open the device's file read-write and that its
// locked-memory limit holds what the group registers; if not, it fails
// with a *verbs.LimitError (verbs.ErrResourceLimit) that names the limit,
// its value, what was needed and the fix.
//
// # One CPU
//
// A rank waits for a completion by polling its completion queues from C
// calls into libibverbs, and posting a request is a C call too (on
// Soft-RoCE a system call). With one P (GOMAXPROCS 1), the Go runtime takes
// the P from a goroutine whose C call outlasts a tick of its monitor thread
// (20 us) and wakes another thread to hold it; on a one-CPU machine every
// post then costs context switches, and the monitor keeps waking every
// 20 us. Join therefore raises GOMAXPROCS from 1 to 2 unless the GOMAXPROCS
// environment variable set it; Go code still runs on the CPUs there are.
// In the one-CPU test guests, a loop of SENDs between two hosts from Go
// took 540 to 630 us a round trip with one P and 370 to 400 us with two
// (from C: 270 to 360 us). A goroutine that polls
// passes through the scheduler once in 1024 polls: one that goes from call
// to call without blocking would otherwise be taken for a long-running one
// after 10 ms, and the monitor would again take its P from a C call. Pollers
// yield the CPU only while more threads are runnable than there are CPUs
// (read from /proc/loadavg): yielding when nothing else waits only switches
// threads.
package group
