#!/usr/bin/env bash
# The project's test command: format check, go vet, staticcheck (an exact
# version, fetched from the module proxy and cached by the go command),
# then every package's tests with the race detector, Google's Pub/Sub
# emulator suite (internal/gcemu/suite) included. Needs Go (1.26+) and the
# module proxy; without the emulator that suite skips (fails under
# CI=true).
set -euo pipefail
cd "$(dirname "$0")/.."
go mod download
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt -l lists files:"; echo "$unformatted"; exit 1
fi
go vet ./...
GOFLAGS= go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
go test -race -count=1 -timeout 12m ./...
