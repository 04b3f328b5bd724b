package main

import (
	"os"
	"strings"

	"github.com/pubsubflow/pubsubflow/internal/limits"
)

// projectEnv are the variables consulted, in order, for the project of a
// short resource name when --project is not given.
var projectEnv = []string{"PUBSUB_PROJECT_ID", "GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT"}

// resolveName returns the full name of a topic or subscription (kind is
// "topics" or "subscriptions") given as "projects/P/KIND/ID", or as "ID"
// with the project from --project or the environment. A bad name is a
// usage error.
func resolveName(kind, name, project string) (string, error) {
	singular := strings.TrimSuffix(kind, "s")
	if strings.HasPrefix(name, "projects/") {
		parts := strings.Split(name, "/")
		if len(parts) != 4 || parts[2] != kind {
			return "", usagef("%s %q: want projects/PROJECT/%s/ID", singular, name, kind)
		}
		if err := checkIDs(singular, name, parts[1], parts[3]); err != nil {
			return "", err
		}
		return name, nil
	}
	if strings.Contains(name, "/") {
		return "", usagef("%s %q: want projects/PROJECT/%s/ID or a bare ID", singular, name, kind)
	}
	if project == "" {
		for _, v := range projectEnv {
			if project = os.Getenv(v); project != "" {
				break
			}
		}
	}
	if project == "" {
		return "", usagef("%s %q is not a full name and no project is set: give projects/PROJECT/%s/%s, --project, or $%s",
			singular, name, kind, name, projectEnv[0])
	}
	if err := checkIDs(singular, name, project, name); err != nil {
		return "", err
	}
	return "projects/" + project + "/" + kind + "/" + name, nil
}

// checkIDs applies the service's name rules (internal/limits, the one
// validator the library uses too); a bad name is a usage error.
func checkIDs(singular, name, project, id string) error {
	if limits.CheckProjectID(project) != nil {
		return usagef("%s %q: bad project id %q (%s)", singular, name, project, limits.ProjectIDRule)
	}
	if limits.CheckResourceID(singular+"s", id) != nil {
		return usagef("%s %q: bad id %q (%s)", singular, name, id, limits.ResourceIDRule)
	}
	return nil
}
