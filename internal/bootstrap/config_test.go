package bootstrap

import (
	"errors"
	"strings"
	"testing"
)

var envVars = []string{
	"RMA_RANK", "RMA_SIZE", "RMA_ADDR", "RMA_SECRET",
	"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
	"PMI_RANK", "PMI_SIZE", "PMIX_RANK",
	"SLURM_PROCID", "SLURM_NTASKS",
}

func TestConfigFromEnv(t *testing.T) {
	base := map[string]string{"RMA_ADDR": "node0:4000", "RMA_SECRET": "s3cret"}
	tests := []struct {
		name       string
		env        map[string]string
		rank, size int
		errPart    string // non-empty: want ErrConfig with this in the message
	}{
		{"rma", map[string]string{"RMA_RANK": "3", "RMA_SIZE": "8"}, 3, 8, ""},
		{"open mpi", map[string]string{"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4"}, 2, 4, ""},
		{"mpich hydra", map[string]string{"PMI_RANK": "1", "PMI_SIZE": "3"}, 1, 3, ""},
		{"pmix under srun", map[string]string{"PMIX_RANK": "5", "SLURM_PROCID": "5", "SLURM_NTASKS": "6"}, 5, 6, ""},
		{"pmix under open mpi", map[string]string{"PMIX_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}, 1, 2, ""},
		{"srun", map[string]string{"SLURM_PROCID": "7", "SLURM_NTASKS": "16"}, 7, 16, ""},
		{"rma overrides launcher", map[string]string{"RMA_RANK": "0", "RMA_SIZE": "2", "OMPI_COMM_WORLD_RANK": "9", "OMPI_COMM_WORLD_SIZE": "10"}, 0, 2, ""},
		{"rma size with launcher rank", map[string]string{"RMA_SIZE": "3", "PMI_RANK": "2", "PMI_SIZE": "9"}, 2, 3, ""},
		{"launcher's own size first", map[string]string{"PMI_RANK": "1", "PMI_SIZE": "2", "SLURM_NTASKS": "9"}, 1, 2, ""},
		{"spaces", map[string]string{"RMA_RANK": " 1 ", "RMA_SIZE": "2\n"}, 1, 2, ""},
		{"nothing", nil, 0, 0, "no rank"},
		{"pmix without size", map[string]string{"PMIX_RANK": "0"}, 0, 0, "no group size"},
		{"malformed rank", map[string]string{"RMA_RANK": "one", "RMA_SIZE": "2"}, 0, 0, `RMA_RANK="one"`},
		{"negative size", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "-2"}, 0, 0, "SLURM_NTASKS"},
		{"rank out of range", map[string]string{"OMPI_COMM_WORLD_RANK": "4", "OMPI_COMM_WORLD_SIZE": "4"}, 0, 0, "rank 4 not in [0, 4)"},
		{"size zero", map[string]string{"RMA_RANK": "0", "RMA_SIZE": "0"}, 0, 0, "size 0"},
		{"no addr", map[string]string{"RMA_RANK": "0", "RMA_SIZE": "2", "RMA_ADDR": ""}, 0, 0, "RMA_ADDR"},
		{"bad addr", map[string]string{"RMA_RANK": "0", "RMA_SIZE": "2", "RMA_ADDR": "node0"}, 0, 0, "host:port"},
		{"no secret", map[string]string{"RMA_RANK": "0", "RMA_SIZE": "2", "RMA_SECRET": ""}, 0, 0, "RMA_SECRET"},
		{"singleton needs neither", map[string]string{"RMA_RANK": "0", "RMA_SIZE": "1", "RMA_ADDR": "", "RMA_SECRET": ""}, 0, 1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, v := range envVars {
				t.Setenv(v, "")
			}
			for k, v := range base {
				t.Setenv(k, v)
			}
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			c, err := ConfigFromEnv()
			if tt.errPart != "" {
				if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.errPart) {
					t.Fatalf("got %v, want ErrConfig mentioning %q", err, tt.errPart)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Rank != tt.rank || c.Size != tt.size {
				t.Fatalf("rank %d size %d, want %d %d", c.Rank, c.Size, tt.rank, tt.size)
			}
			wantAddr := base["RMA_ADDR"]
			if v, ok := tt.env["RMA_ADDR"]; ok {
				wantAddr = v
			}
			if c.Addr != wantAddr {
				t.Errorf("addr %q, want %q", c.Addr, wantAddr)
			}
			if tt.size > 1 && string(c.Secret) != "s3cret" {
				t.Errorf("secret %q", c.Secret)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	ok := Config{Rank: 1, Size: 2, Addr: "10.0.0.1:7000", Secret: []byte("k")}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := []Config{
		{Rank: 0, Size: 0},
		{Rank: -1, Size: 1},
		{Rank: 1, Size: 1},
		{Rank: 0, Size: MaxSize + 1, Addr: "h:1", Secret: []byte("k")},
		{Rank: 0, Size: 2, Secret: []byte("k")},
		{Rank: 0, Size: 2, Addr: "h", Secret: []byte("k")},
		{Rank: 0, Size: 2, Addr: "h:", Secret: []byte("k")},
		{Rank: 0, Size: 2, Addr: "h:1"},
		{Rank: 0, Size: 1, HandshakeTimeout: -1},
	}
	for _, c := range bad {
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: got %v, want ErrConfig", c, err)
		}
	}
}
