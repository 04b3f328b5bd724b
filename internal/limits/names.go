package limits

import (
	"fmt"
	"regexp"
	"strings"
)

var (
	resourceID = regexp.MustCompile(`^[A-Za-z][-A-Za-z0-9._~%+]{2,254}$`)
	projectID  = regexp.MustCompile(`^[a-z][-a-z0-9.:]{0,98}[a-z0-9]$|^[a-z]$`)
)

// Kinds of resource, as they appear in a name: "projects/P/KIND/ID".
const (
	Topics        = "topics"
	Subscriptions = "subscriptions"
	Snapshots     = "snapshots"
)

// NameError is a resource name or id that breaks the service's rules.
type NameError struct {
	Kind   string // Topics, Subscriptions, Snapshots, or "projects"
	Name   string // the name as given
	Reason string // which rule it breaks
}

// Error returns "KIND NAME: REASON" with the singular kind.
func (e *NameError) Error() string {
	return fmt.Sprintf("%s %q: %s", strings.TrimSuffix(e.Kind, "s"), e.Name, e.Reason)
}

// ResourceIDRule describes a valid topic, subscription or snapshot id.
const ResourceIDRule = `3–255 of letters, digits, -._~%+, starting with a letter, not with "goog"`

// ProjectIDRule describes a valid project id.
const ProjectIDRule = `a lowercase letter, then lowercase letters, digits, -.:, ending with a letter or digit, at most 100`

// CheckResourceID reports whether id is a valid topic, subscription or
// snapshot id: 3–255 characters of [A-Za-z0-9-_.~+%], starting with a
// letter, not starting with "goog" (in any case).
func CheckResourceID(kind, id string) error {
	if !resourceID.MatchString(id) || strings.HasPrefix(strings.ToLower(id), ReservedPrefix) {
		return &NameError{Kind: kind, Name: id, Reason: "bad id (" + ResourceIDRule + ")"}
	}
	return nil
}

// CheckProjectID reports whether id is a valid project id.
func CheckProjectID(id string) error {
	if !projectID.MatchString(id) {
		return &NameError{Kind: "projects", Name: id, Reason: "bad project id (" + ProjectIDRule + ")"}
	}
	return nil
}

// CheckName reports whether name is "projects/PROJECT/KIND/ID" with a
// valid project id and resource id.
func CheckName(kind, name string) error {
	parts := strings.Split(name, "/")
	if len(parts) != 4 || parts[0] != "projects" || parts[2] != kind {
		return &NameError{Kind: kind, Name: name, Reason: "want projects/PROJECT/" + kind + "/ID"}
	}
	if err := CheckProjectID(parts[1]); err != nil {
		return &NameError{Kind: kind, Name: name, Reason: fmt.Sprintf("bad project id %q (%s)", parts[1], ProjectIDRule)}
	}
	if err := CheckResourceID(kind, parts[3]); err != nil {
		return &NameError{Kind: kind, Name: name, Reason: fmt.Sprintf("bad id %q (%s)", parts[3], ResourceIDRule)}
	}
	return nil
}

// ServiceNameMessage is the service's INVALID_ARGUMENT wording for a bad
// name of kind.
func ServiceNameMessage(kind, name string) string {
	return fmt.Sprintf("Invalid [%s] name: (name=%s)", kind, name)
}
