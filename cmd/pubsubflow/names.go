package main

import (
	"os"
	"regexp"
	"strings"
)

// Pub/Sub resource ids: a letter, then 2–254 letters, digits or -._~%+,
// not starting with "goog" (the API's rule).
var (
	resourceID = regexp.MustCompile(`^[A-Za-z][-A-Za-z0-9._~%+]{2,254}$`)
	projectID  = regexp.MustCompile(`^[a-z][-a-z0-9.:]{0,99}[a-z0-9]$|^[a-z]$`)
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

func checkIDs(singular, name, project, id string) error {
	if !projectID.MatchString(project) {
		return usagef("%s %q: bad project id %q", singular, name, project)
	}
	if !resourceID.MatchString(id) || strings.HasPrefix(strings.ToLower(id), "goog") {
		return usagef("%s %q: bad id %q (3–255 of letters, digits, -._~%%+, starting with a letter, not with \"goog\")", singular, name, id)
	}
	return nil
}
