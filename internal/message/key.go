package message

// Key is the argument of source.Step's Receipt: only this module's
// packages can make one, so only a source calls a step's receipt hooks
// (a user cannot call a gate's budget or a tracker's lease hooks wrong).
type Key struct{}
