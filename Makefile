# engram: build, test, lint. CI (.ci/run) calls these same targets.

GO            ?= go
GOLANGCI_LINT ?= golangci-lint
# The golangci-lint CI installs (.ci/run names the same version).
GOLANGCI_LINT_VERSION ?= v2.15.0
BIN           ?= bin/engram
VERSION       ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

.PHONY: all build test lint fmt bench fuzz clean

all: build

build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN) ./cmd/engram

# cmd/engram's tests, which run the real harnesses, took 456 s alone and
# reached go test's default limit of 10 minutes a package in a full run on
# two loaded cores: 30 minutes.
test:
	$(GO) test -race -timeout 30m ./...

lint:
	@command -v $(GOLANGCI_LINT) >/dev/null || { echo "make lint needs golangci-lint, which is not on PATH; install the version CI runs:"; \
		echo "  go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)   (into \$$(go env GOPATH)/bin)"; exit 1; }
	@unformatted=$$(gofmt -l .); if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GOLANGCI_LINT) run ./...

fmt:
	gofmt -w .

# Go micro-benchmarks; engram bench produces the figures in BENCHMARKS.md.
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# Short fuzzing of every fuzz target. -fuzzminimizetime 0: minimisation
# stalls the fuzzer on some machines.
fuzz:
	@for t in "./internal/tokens FuzzPieces" "./internal/terms FuzzAppend" "./internal/chunk FuzzText" "./internal/retrieve FuzzHybridSearch" "./internal/engine FuzzAdd" "./internal/engine FuzzReadJSONL" \
		"./internal/ctxref FuzzParse" "./internal/ctxref FuzzRoundTrip" "./internal/ctxref FuzzFind" \
		"./internal/trajectory FuzzReadRuns" "./internal/trajectory FuzzPyDumps" "./internal/trajectory FuzzNeedles" \
		"./internal/api FuzzDecodeMessage" "./internal/api FuzzDuplicateName" "./cmd/engram FuzzReplayRead" "./internal/assemble FuzzAssemble" "./internal/window FuzzReadable"; do \
		set -- $$t; $(GO) test $$1 -run '^$$' -fuzz "^$$2$$" -fuzztime 30s -fuzzminimizetime 0 || exit 1; \
	done

clean:
	rm -rf bin
