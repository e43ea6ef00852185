package lint

import (
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// The documentation is part of the product: a newcomer follows the README's
// map into docs/, and a link that leads nowhere (a page renamed, a section
// moved) is a dead end found only by a reader. These tests walk every
// Markdown file of the repository the way GitHub renders it.

// markdownFiles returns the repository's Markdown files (paths relative to
// root), skipping hidden folders (.git, virtual environments, caches), bin
// and testdata (golden outputs are not documentation).
func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "bin" || d.Name() == "testdata" || d.Name() == "third_party" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".md") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// markdownDoc is what the link check needs of one file: its links (outside
// code) with their line numbers, and the anchors its headings define.
type markdownDoc struct {
	links   []markdownLink
	anchors map[string]bool
}

type markdownLink struct {
	line   int
	target string
}

var (
	inlineLinkRE = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	refDefRE     = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+"[^"]*")?\s*$`)
	headingRE    = regexp.MustCompile(`^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	htmlAnchorRE = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	linkTextRE   = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
)

// parseMarkdown reads the links and heading anchors of a Markdown text.
// Fenced code blocks and inline code spans hold no links.
func parseMarkdown(text string) markdownDoc {
	doc := markdownDoc{anchors: map[string]bool{}}
	seen := map[string]int{}
	fence := "" // the opening fence while inside a fenced block
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimLeft(line, " \t")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, fence[:1]+" \t") == "" {
				fence = ""
			}
			continue
		}
		if f := fenceOpening(trimmed); f != "" {
			fence = f
			continue
		}
		if m := headingRE.FindStringSubmatch(line); m != nil {
			slug := headingSlug(m[2])
			if n := seen[slug]; n > 0 {
				doc.anchors[fmt.Sprintf("%s-%d", slug, n)] = true
			} else {
				doc.anchors[slug] = true
			}
			seen[slug]++
		}
		for _, m := range htmlAnchorRE.FindAllStringSubmatch(line, -1) {
			doc.anchors[m[1]] = true
		}
		code := withoutCodeSpans(line)
		if m := refDefRE.FindStringSubmatch(code); m != nil {
			doc.links = append(doc.links, markdownLink{i + 1, m[1]})
			continue
		}
		for _, m := range inlineLinkRE.FindAllStringSubmatch(code, -1) {
			doc.links = append(doc.links, markdownLink{i + 1, m[1]})
		}
	}
	return doc
}

// fenceOpening returns the fence (``` or ~~~, at its full length) that line
// opens, or "".
func fenceOpening(line string) string {
	for _, c := range []string{"`", "~"} {
		n := len(line) - len(strings.TrimLeft(line, c))
		if n >= 3 && (c == "~" || !strings.Contains(line[n:], "`")) {
			return strings.Repeat(c, n)
		}
	}
	return ""
}

// withoutCodeSpans blanks the inline code spans of a line (a run of N
// backticks up to the next run of exactly N), so that `[a](b)` written as
// code is not taken for a link.
func withoutCodeSpans(line string) string {
	var b strings.Builder
	for i := 0; i < len(line); {
		if line[i] != '`' {
			b.WriteByte(line[i])
			i++
			continue
		}
		n := 0
		for i+n < len(line) && line[i+n] == '`' {
			n++
		}
		closing := -1
		for j := i + n; j < len(line); {
			if line[j] != '`' {
				j++
				continue
			}
			k := 0
			for j+k < len(line) && line[j+k] == '`' {
				k++
			}
			if k == n {
				closing = j
				break
			}
			j += k
		}
		if closing < 0 { // an unmatched run is literal text
			b.WriteString(line[i : i+n])
			i += n
			continue
		}
		b.WriteString(strings.Repeat(" ", closing+n-i))
		i = closing + n
	}
	return b.String()
}

// headingSlug is the anchor GitHub gives a heading: the rendered text
// (links reduced to their text), lower-cased, with every character that is
// not a letter, a digit, '-' or '_' removed and each space made a '-'.
func headingSlug(heading string) string {
	text := linkTextRE.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestHeadingSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"Running in production":                                 "running-in-production",
		"Models: LLM oracles, the LLM solver and the LLM asker": "models-llm-oracles-the-llm-solver-and-the-llm-asker",
		"`BIRD_C`, as BIRD-Interact plays it":                   "bird_c-as-bird-interact-plays-it",
		"Limits (§4) — at a glance":                             "limits-4--at-a-glance",
		"See [the CLI](docs/cli.md) first":                      "see-the-cli-first",
		"Café *déjà* vu":                                        "café-déjà-vu",
	} {
		if got := headingSlug(heading); got != want {
			t.Errorf("headingSlug(%q) = %q, want %q", heading, got, want)
		}
	}
}

func TestParseMarkdown(t *testing.T) {
	doc := parseMarkdown("# Title\n\nSee [a](a.md#x) and `[b](not-a-link.md)`.\n" +
		"```sh\n[c](inside-a-fence.md)\n# not a heading\n```\n" +
		"  ```` ```json ```` is code, [d](#title) is not\n" +
		"## Title\n[e]: ref.md\n![img](pic.png \"a title\")\n")
	var got []string
	for _, l := range doc.links {
		got = append(got, fmt.Sprintf("%d:%s", l.line, l.target))
	}
	if want := []string{"3:a.md#x", "8:#title", "10:ref.md", "11:pic.png"}; !slices.Equal(got, want) {
		t.Errorf("links = %v, want %v", got, want)
	}
	for _, a := range []string{"title", "title-1"} {
		if !doc.anchors[a] {
			t.Errorf("no anchor %q in %v", a, doc.anchors)
		}
	}
	if doc.anchors["not-a-heading"] {
		t.Error("a line inside a code fence was taken for a heading")
	}
}

// TestMarkdownLinks fails when a relative link in a Markdown file names a
// file that does not exist, leaves the repository, or names an anchor that
// no heading of its target defines.
func TestMarkdownLinks(t *testing.T) {
	root := filepath.Join("..", "..")
	files := markdownFiles(t, root)
	if !slices.Contains(files, "README.md") || !slices.Contains(files, "docs/cli.md") {
		t.Fatalf("found %v: is the walk rooted at the module?", files)
	}
	docs := map[string]markdownDoc{}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		docs[f] = parseMarkdown(string(b))
	}
	checked := 0
	for _, f := range files {
		for _, l := range docs[f].links {
			target := l.target
			if u, err := url.Parse(target); err == nil && u.Scheme != "" || strings.HasPrefix(target, "//") {
				continue // absolute: http, https, mailto
			}
			checked++
			where := fmt.Sprintf("%s:%d: link %q", f, l.line, target)
			path, anchor, _ := strings.Cut(target, "#")
			if p, err := url.PathUnescape(path); err == nil {
				path = p
			}
			dest := f
			if path != "" {
				dest = filepath.ToSlash(filepath.Join(filepath.Dir(f), path))
				if dest == ".." || strings.HasPrefix(dest, "../") || filepath.IsAbs(path) {
					t.Errorf("%s leaves the repository", where)
					continue
				}
				if _, err := os.Stat(filepath.Join(root, dest)); err != nil {
					t.Errorf("%s: %s does not exist", where, dest)
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			d, ok := docs[dest]
			if !ok {
				t.Errorf("%s: %s was not read", where, dest)
				continue
			}
			if !d.anchors[anchor] {
				t.Errorf("%s: %s has no heading with anchor #%s", where, dest, anchor)
			}
		}
	}
	if checked < 50 {
		t.Fatalf("checked only %d relative links: is the link parser broken?", checked)
	}
}

// TestLayoutNamesEveryPackage fails when the README's "## Layout" table
// does not name a package of the module (as `path/to/pkg`), so that the
// newcomer's map of the tree grows with the tree.
func TestLayoutNamesEveryPackage(t *testing.T) {
	root := filepath.Join("..", "..")
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, layout, ok := strings.Cut(string(b), "\n## Layout\n")
	if !ok {
		t.Fatal("README.md has no ## Layout section")
	}
	if i := strings.Index(layout, "\n## "); i >= 0 {
		layout = layout[:i]
	}
	named := map[string]bool{}
	for _, m := range regexp.MustCompile("`([a-z0-9_./-]+)`").FindAllStringSubmatch(layout, -1) {
		named[strings.TrimSuffix(m[1], "/")] = true
	}
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := strings.Fields(string(out))
	if len(pkgs) < 20 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	for _, p := range pkgs {
		dir, ok := strings.CutPrefix(p, "avtgym/")
		if !ok {
			continue // the module's root package, if it ever has one
		}
		if !named[dir] {
			t.Errorf("README.md's ## Layout does not name package %s (write `%s` in its row)", p, dir)
		}
	}
}
