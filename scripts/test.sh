#!/usr/bin/env bash
# The project's test command: format check, go vet, staticcheck (an exact
# version, fetched from the module proxy and cached by the go command),
# the doc check (scripts/doccheck), then every package's tests with the
# race detector, Google's Pub/Sub emulator suite (internal/gcemu/suite)
# included. Each phase prints its name and result; the first failure stops
# the script. Needs Go (1.26+) and the module proxy; without the emulator
# that suite skips (fails under CI=true).
set -euo pipefail
cd "$(dirname "$0")/.."
go mod download
files=$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')
unformatted=$(gofmt -l $files)
if [ -n "$unformatted" ]; then
  echo "gofmt: FAIL, these files need gofmt:"; echo "$unformatted"; exit 1
fi
echo "gofmt: ok ($(echo "$files" | wc -l) files)"
go vet ./...
echo "vet: ok"
GOFLAGS= go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
echo "staticcheck: ok"
go run ./scripts/doccheck
echo "tests: running go test -race ./..."
go test -race -count=1 -timeout 12m ./...
echo "tests: ok"
