package bootstrap

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// DefaultHandshakeTimeout bounds each handshake when Config.HandshakeTimeout is zero.
const DefaultHandshakeTimeout = 10 * time.Second

// MaxSize is the largest group size accepted.
const MaxSize = 1 << 20

// Config says who this process is in the group and how to meet the others.
type Config struct {
	Rank, Size int
	// Addr is the host:port where rank 0 listens and the others dial.
	// Required when Size > 1.
	Addr string
	// Secret is shared by every rank; required when Size > 1. Use at least
	// 16 random bytes: an eavesdropper who records a handshake can test
	// guesses of the secret offline.
	Secret []byte
	// HandshakeTimeout bounds each handshake (rank 0 per incoming
	// connection, a joiner from connect to admission).
	// Zero means DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// Logf, if set, receives a line for every connection rank 0 refuses.
	Logf func(format string, args ...any)
}

// Validate checks c: 1 <= Size <= MaxSize, 0 <= Rank < Size, and when
// Size > 1 a host:port Addr and a non-empty Secret. A missing secret is
// reported as both ErrConfig and ErrAuth.
func (c Config) Validate() error {
	switch {
	case c.Size < 1 || c.Size > MaxSize:
		return fmt.Errorf("bootstrap: %w: size %d not in [1, %d]", ErrConfig, c.Size, MaxSize)
	case c.Rank < 0 || c.Rank >= c.Size:
		return fmt.Errorf("bootstrap: %w: rank %d not in [0, %d)", ErrConfig, c.Rank, c.Size)
	case c.HandshakeTimeout < 0:
		return fmt.Errorf("bootstrap: %w: negative handshake timeout %v", ErrConfig, c.HandshakeTimeout)
	case c.Size == 1:
		return nil
	case c.Addr == "":
		return fmt.Errorf("bootstrap: %w: no address of rank 0 (set RMA_ADDR or Config.Addr)", ErrConfig)
	case len(c.Secret) == 0:
		return fmt.Errorf("bootstrap: %w: %w: no shared secret (set RMA_SECRET or Config.Secret); required when size > 1",
			ErrConfig, ErrAuth)
	}
	if _, port, err := net.SplitHostPort(c.Addr); err != nil || port == "" {
		return fmt.Errorf("bootstrap: %w: address %q is not host:port", ErrConfig, c.Addr)
	}
	return nil
}

func (c Config) handshakeTimeout() time.Duration {
	if c.HandshakeTimeout > 0 {
		return c.HandshakeTimeout
	}
	return DefaultHandshakeTimeout
}

// launchers lists where rank and size come from, in order of preference.
var launchers = []struct{ rank, size string }{
	{"RMA_RANK", "RMA_SIZE"},
	{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}, // Open MPI
	{"PMI_RANK", "PMI_SIZE"},                         // MPICH / Hydra
	{"PMIX_RANK", ""},                                // PMIx: size comes from another variable
	{"SLURM_PROCID", "SLURM_NTASKS"},                 // srun
}

// ConfigFromEnv builds a validated Config from the environment.
//
// The rank is RMA_RANK, else the first of OMPI_COMM_WORLD_RANK, PMI_RANK,
// PMIX_RANK, SLURM_PROCID that is set. The size is RMA_SIZE, else the size
// variable of the launcher that gave the rank, else the first of
// OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_NTASKS that is set. Addr is RMA_ADDR
// and Secret is RMA_SECRET (its bytes as they are). Empty variables count
// as unset. Errors wrap ErrConfig.
func ConfigFromEnv() (Config, error) {
	var c Config
	from := -1
	for i, l := range launchers {
		if os.Getenv(l.rank) != "" {
			from = i
			break
		}
	}
	if from < 0 {
		return c, fmt.Errorf("bootstrap: %w: no rank in the environment (set RMA_RANK and RMA_SIZE, or start under mpirun, mpiexec or srun)", ErrConfig)
	}
	sizeVars := []string{"RMA_SIZE", launchers[from].size, "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"}
	sizeVar := ""
	for _, v := range sizeVars {
		if v != "" && os.Getenv(v) != "" {
			sizeVar = v
			break
		}
	}
	if sizeVar == "" {
		return c, fmt.Errorf("bootstrap: %w: rank given by %s but no group size in the environment (set RMA_SIZE)",
			ErrConfig, launchers[from].rank)
	}
	var err error
	if c.Rank, err = envInt(launchers[from].rank); err != nil {
		return c, err
	}
	if c.Size, err = envInt(sizeVar); err != nil {
		return c, err
	}
	c.Addr = os.Getenv("RMA_ADDR")
	if s := os.Getenv("RMA_SECRET"); s != "" {
		c.Secret = []byte(s)
	}
	return c, c.Validate()
}

func envInt(name string) (int, error) {
	s := os.Getenv(name)
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("bootstrap: %w: %s=%q is not a non-negative integer", ErrConfig, name, s)
	}
	return n, nil
}
