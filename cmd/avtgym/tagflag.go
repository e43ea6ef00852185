package main

import (
	"fmt"
	"sort"
	"strings"
)

// tagFlag collects repeated --tag KEY=VALUE flags into the tags of every
// reset (ResetRequest.tags); the server checks their bounds.
type tagFlag map[string]string

func (t *tagFlag) String() string {
	if t == nil || len(*t) == 0 {
		return ""
	}
	parts := make([]string, 0, len(*t))
	for k, v := range *t {
		parts = append(parts, k+"="+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func (t *tagFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want KEY=VALUE, got %q", s)
	}
	if *t == nil {
		*t = tagFlag{}
	}
	if _, dup := (*t)[k]; dup {
		return fmt.Errorf("tag %q given twice", k)
	}
	(*t)[k] = v
	return nil
}

// tagUsage is the --tag flag's help.
const tagUsage = "KEY=VALUE: a tag sealed into every episode and written with its record (repeatable; at most 16, keys of ASCII letters, digits and ._-:/ up to 64 bytes, values up to 256)"
