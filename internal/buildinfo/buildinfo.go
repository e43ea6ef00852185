// Package buildinfo says which build of avtgym is running, for records and
// logs: the module version, or "devel" with the VCS revision it was built
// from.
package buildinfo

import (
	"runtime/debug"
	"sync"
)

// Version is this binary's version: the main module's version when it was
// built from a tagged module ("v0.3.0"), otherwise "devel", followed by
// "+" and the first 12 digits of the VCS revision when the build recorded
// one ("-dirty" when the work tree had changes).
var Version = sync.OnceValue(func() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	v := bi.Main.Version
	if v == "" || v == "(devel)" {
		v = "devel"
	}
	var rev string
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if v == "devel" && rev != "" {
		v += "+" + rev[:min(12, len(rev))]
		if dirty {
			v += "-dirty"
		}
	}
	return v
})
