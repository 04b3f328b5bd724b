package gcemu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// EnvBinary names the environment variable that points at the emulator's
// launcher script (cloud-pubsub-emulator); it wins over the gcloud SDK.
const EnvBinary = "PUBSUB_EMULATOR_BIN"

// launcherInSDK is where the Debian package google-cloud-cli-pubsub-emulator
// (and `gcloud components install pubsub-emulator`) puts the launcher,
// relative to the SDK root that `gcloud info` reports.
const launcherInSDK = "platform/pubsub-emulator/bin/cloud-pubsub-emulator"

// ErrNotInstalled is returned by Find when no emulator can be found.
var ErrNotInstalled = errors.New("gcemu: Google's Pub/Sub emulator is not installed")

// gcloudInfoTimeout bounds `gcloud info`, which is a Python program and can
// take a few seconds on a busy machine.
const gcloudInfoTimeout = 30 * time.Second

// Find returns the path of the emulator's launcher: $PUBSUB_EMULATOR_BIN if
// set, else the one under the SDK root that `gcloud info` reports. The error
// wraps ErrNotInstalled and says where it looked.
func Find() (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		if err := executable(p); err != nil {
			return "", fmt.Errorf("%w: $%s=%s: %v", ErrNotInstalled, EnvBinary, p, err)
		}
		return p, nil
	}
	gcloud, err := exec.LookPath("gcloud")
	if err != nil {
		return "", fmt.Errorf("%w: $%s is unset and gcloud is not on PATH (install google-cloud-cli-pubsub-emulator)", ErrNotInstalled, EnvBinary)
	}
	ctx, cancel := context.WithTimeout(context.Background(), gcloudInfoTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, gcloud, "info", "--format=value(installation.sdk_root)").Output()
	if err != nil {
		return "", fmt.Errorf("%w: gcloud info: %v", ErrNotInstalled, err)
	}
	root := strings.TrimSpace(string(out))
	if root == "" {
		return "", fmt.Errorf("%w: gcloud info reports no SDK root", ErrNotInstalled)
	}
	p := filepath.Join(root, launcherInSDK)
	if err := executable(p); err != nil {
		return "", fmt.Errorf("%w: %s: %v (install google-cloud-cli-pubsub-emulator)", ErrNotInstalled, p, err)
	}
	return p, nil
}

func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return errors.New("not an executable file")
	}
	return nil
}
