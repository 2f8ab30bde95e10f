# make test   unit tests on the host, then the integration tests on rxe
#             (in the test VM when the host has no RDMA device)
# make demo   the MPI standard's accumulate example across 4 processes on rxe
# make bench  this library against perftest on the same device, same boot
# make bench-sw  the software per call of every path, on the stand-in NIC
#                (no device): a table, and bench-sw.json
GO      ?= go
BIN     := $(CURDIR)/.cache/bin
# The linter, fetched through the module proxy by go run (pinned).
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
RXEVM   := $(BIN)/rxevm
FUZZTIME ?= 100000x

.PHONY: all test deps unit nocgo fuzz integration twohost lossy-heavy demo bench bench-sw tools clean

all: test

deps:
	@bash hack/install-deps.sh

tools: deps
	@mkdir -p $(BIN)
	$(GO) build -o $(RXEVM) ./test/rxevm
	$(GO) build -o $(BIN)/ ./cmd/rmarun ./cmd/rmainfo ./examples/...

# The stages one after the other, each with its time (hack/stages.sh).
test:
	@MAKE="$(MAKE)" bash hack/stages.sh deps unit nocgo fuzz integration consumer twohost

unit: deps
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then echo "gofmt -w these files: $$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags integration ./test
	$(GO) run $(STATICCHECK) ./...
	$(GO) run $(STATICCHECK) -tags integration ./test
	$(GO) test -race -count=1 ./...
	$(GO) vet -tags standin ./verbs ./service ./internal/swbench
	$(GO) run $(STATICCHECK) -tags standin ./verbs ./service ./internal/swbench
	$(GO) test -race -count=1 -tags standin -benchtime 200x ./verbs ./internal/swbench

nocgo:
	CGO_ENABLED=0 $(GO) build ./...
	CGO_ENABLED=0 $(GO) test -count=1 ./...

# Every fuzz target of the decoders of bytes from the network, briefly; a
# failure prints the fuzzer's output and the failing input (kept in testdata).
FUZZPKGS := ./internal/bootstrap ./fallback ./datatype ./verbs ./service
fuzz:
	GO=$(GO) FUZZTIME=$(FUZZTIME) bash hack/fuzz.sh $(FUZZPKGS)

# The integration tests run on rxe (in the test VM where the host has no
# RDMA device), then all of them again built with the race detector.
# The race pass leaves out the longest data-moving tests (the collectives
# on up to 8 ranks, the 64 MiB accumulate) and TestReplyWake, which counts
# wake-ups that the race detector's slowness shifts (36 of 74 for a bound
# of 37 in one run): they run in the plain pass, and the reductions' Go
# code is race-tested in the unit tests.
RACE_SKIP := ^(TestColl[0-9]+|TestCollAllreduceUserOpTiming|TestAccumulate64MiB|TestReplyWake)$$
integration: tools
	$(GO) test -c -tags integration -o $(BIN)/integration.test ./test
	$(GO) test -c -race -tags integration -o $(BIN)/integration-race.test ./test
	RMA_EXAMPLES_DIR=$(BIN) $(RXEVM) -timeout 60m -- sh -c '$(BIN)/integration.test -test.v -test.count=1 -test.timeout=25m && \
		echo "== race detector ==" && RMA_SOAK_TIME=4s $(BIN)/integration-race.test -test.v -test.count=1 -test.timeout=25m -test.skip="$(RACE_SKIP)"'

# The module used from a module of one's own: hack/consumer.sh builds the
# README's program and a program calling the public packages but service in a temporary
# module outside this repository (go mod tidy, build, vet, a CGO_ENABLED=0
# build that must report verbs.ErrNotSupported), then runs both on rxe.
consumer: tools
	GO=$(GO) BIN=$(BIN) bash hack/consumer.sh

# Two hosts: the test VM's two-host mode boots two guests, each with its own
# rxe0 on a virtio-net NIC, joined by a UDP wire. First boot: TestTwoHost (one
# rank per host; host1's NIC has a 9000-byte MTU, so rxe0 runs at 4096 there
# and 1024 on host0: the ranks must agree on the smaller path MTU), the
# examples and a subset of the integration tests with their ranks spread over
# both hosts, then TestTwoHostProcessDeath (rank 1's process is SIGKILLed).
# TestTwoHostServiceProbe duplicates host0's frames with netem while a
# client on host1 holds a service lock that the server probes;
# TestTwoHostServiceResume drops them all for 1.5 s while the client calls,
# and the client resumes its session; TestTwoHostServiceResumeIdle, the same
# while the client holds its lock without a call.
# Second boot: TestTwoHostHostDeath (rxevm kills host1's guest when its test
# asks) on a wire that loses 2% of the frames. Both death tests print how long
# each path took to report ErrPeerLost.
# Third boot: TestTwoHostLossy through rxevm's relay, which the test sets to
# each of its phases' faults (2% loss with 1% duplication and 2% reordering;
# 20 ms jitter); rxevm prints the frames dropped, duplicated and reordered.
# Then TestTwoHostTCPCut: 1 MiB Puts both ways at 5% loss while every TCP
# frame is dropped for 6 s. make lossy-heavy runs TestTwoHostLossy at 5%
# loss, beyond the bound the library states.
TWOHOST_TEST := $(BIN)/integration.test -test.v -test.count=1
TWOHOST_RUN1 := -test.run="^TestTwoHost(|Examples|Subset|ServiceProbe|ServiceResume|ServiceResumeIdle|ProcessDeath)$$"
twohost: tools
	$(GO) test -c -tags integration -o $(BIN)/integration.test ./test
	RMA_SECRET=$$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n') RMA_EXAMPLES_DIR=$(BIN) \
		$(RXEVM) -hosts 2 -timeout 15m -- $(TWOHOST_TEST) $(TWOHOST_RUN1) \
		::: sh -c 'ip link set eth0 mtu 9000 && sleep 1 && ibv_devinfo -d rxe0 | grep active_mtu && exec $(TWOHOST_TEST) $(TWOHOST_RUN1)'
	$(RXEVM) -hosts 2 -timeout 10m -wire loss=2%,seed=4 -- $(TWOHOST_TEST) -test.run='^TestTwoHostHostDeath$$'
	$(RXEVM) -hosts 2 -timeout 15m -wire none -- $(TWOHOST_TEST) -test.run='^TestTwoHost(Lossy|TCPCut)$$'

lossy-heavy: tools
	$(GO) test -c -tags integration -o $(BIN)/integration.test ./test
	RMA_LOSSY_WIRES='loss=5%,seed=3' $(RXEVM) -hosts 2 -timeout 15m -wire none -- $(TWOHOST_TEST) -test.run='^TestTwoHost(Lossy|TCPCut)$$'

demo: tools
	$(RXEVM) -- $(BIN)/rmarun -n 4 $(BIN)/accumulate

# make bench  perftest and cmd/rmabench on one RDMA device (the test VM's rxe0
#             when the host has none), then across the test VM's two hosts
#             (rxevm -hosts 2, rows named .../2host); MPICH in the one-host
#             boot (rows named .../mpich): one table, and bench-results.json
bench: tools
	$(GO) build -o $(BIN)/rmabench ./cmd/rmabench
	RXEVM=$(RXEVM) BIN=$(BIN) bash hack/bench.sh

# The stand-in NIC (package verbs, build tag standin) carries out each work
# request while it is posted, so what TestSoftware times is the library's
# software: ns and CPU ns per call, allocations, against a C and a Go loop
# of post and poll (package swbench's documentation).
bench-sw: deps
	RMA_BENCH_SW_JSON=$(CURDIR)/bench-sw.json $(GO) test -tags standin -count=1 -run '^TestSoftware$$' -v ./internal/swbench

clean:
	rm -rf .cache
