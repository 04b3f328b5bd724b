package pubsubtest

import (
	"strings"

	"github.com/pubsubflow/pubsubflow/internal/limits"
)

// checkName is the real service's INVALID_ARGUMENT for a topic or
// subscription name that breaks its rules (limits.CheckName: a valid
// project id, then an id of 3–255 allowed characters starting with a
// letter and not with "goog"), so a test cannot pass with a name
// production refuses.
func checkName(kind, name string) error {
	if limits.CheckName(kind, name) != nil {
		return invalidArg("%s", limits.ServiceNameMessage(kind, name))
	}
	return nil
}

// checkProject checks the "projects/P" of a List request.
func checkProject(project string) error {
	id, ok := strings.CutPrefix(project, "projects/")
	if !ok || limits.CheckProjectID(id) != nil {
		return invalidArg("%s", limits.ServiceNameMessage("projects", project))
	}
	return nil
}
