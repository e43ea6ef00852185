package viewer

import (
	"cmp"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Bounds on request parameters: a filter longer than a tag's key and value
// together can match nothing, and a query past maxQuery is refused before
// it is parsed.
const (
	maxParam = 400
	maxQuery = 4096
	pageSize = 50
	// maxPage bounds the page number read (larger is clamped to the last
	// page anyway); it keeps the arithmetic far from overflow.
	maxPage = 1 << 24
)

// Filter selects a run's episodes; its fields are the list page's GET
// parameters, so that a filtered view is a shareable URL.
type Filter struct {
	Protocol  string // "ambitab" matches records without a protocol
	Status    string
	Task      string // substring of the task id
	Tag       string // key=value, or key alone for "has the tag"
	Condition string
	Oracle    string
	RewardMin string
	RewardMax string
	// NoQuestions keeps episodes that asked nothing; ErrorsOnly those with
	// status ERROR.
	NoQuestions bool
	ErrorsOnly  bool
	// Sort is "" (file order), "reward", "-reward", "questions",
	// "-questions" or "task".
	Sort string
	Page int

	rewardMin, rewardMax float64
	tagKey, tagValue     string
	tagHasValue          bool
}

var sortOrders = []string{"", "reward", "-reward", "questions", "-questions", "task"}

// parseFilter reads a filter from a query, refusing what it cannot use:
// an over-long value, a number that is not one, an unknown sort.
func parseFilter(q url.Values) (Filter, error) {
	f := Filter{Page: 1, rewardMin: math.Inf(-1), rewardMax: math.Inf(1)}
	for name, vs := range q {
		for _, v := range vs {
			if len(v) > maxParam {
				return f, fmt.Errorf("parameter %s is longer than %d bytes", name, maxParam)
			}
		}
	}
	f.Protocol, f.Status, f.Task, f.Tag = q.Get("protocol"), q.Get("status"), strings.TrimSpace(q.Get("task")), strings.TrimSpace(q.Get("tag"))
	f.Condition, f.Oracle, f.Sort = q.Get("condition"), q.Get("oracle"), q.Get("sort")
	f.RewardMin, f.RewardMax = strings.TrimSpace(q.Get("rmin")), strings.TrimSpace(q.Get("rmax"))
	f.NoQuestions, f.ErrorsOnly = q.Get("noq") != "", q.Get("errors") != ""
	if !slices.Contains(sortOrders, f.Sort) {
		return f, fmt.Errorf("sort must be one of %s", strings.Join(sortOrders[1:], ", "))
	}
	var err error
	if f.rewardMin, err = parseBound("rmin", f.RewardMin, math.Inf(-1)); err != nil {
		return f, err
	}
	if f.rewardMax, err = parseBound("rmax", f.RewardMax, math.Inf(1)); err != nil {
		return f, err
	}
	if f.Tag != "" {
		f.tagKey, f.tagValue, f.tagHasValue = strings.Cut(f.Tag, "=")
		f.tagKey = strings.TrimSpace(f.tagKey)
	}
	if p := q.Get("page"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 {
			return f, fmt.Errorf("page must be a whole number from 1")
		}
		f.Page = min(n, maxPage)
	}
	return f, nil
}

func parseBound(name, s string, none float64) (float64, error) {
	if s == "" {
		return none, nil
	}
	x, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
		return 0, fmt.Errorf("%s must be a finite number, not %q", name, s)
	}
	return x, nil
}

func (f *Filter) match(s *Summary) bool {
	switch {
	case f.Protocol != "" && protocolLabel(s.Protocol) != f.Protocol,
		f.Status != "" && s.Status != f.Status,
		f.ErrorsOnly && s.Status != "ERROR",
		f.Condition != "" && s.Condition != f.Condition,
		f.Oracle != "" && s.Oracle != f.Oracle,
		f.NoQuestions && s.Questions != 0,
		f.Task != "" && !strings.Contains(s.TaskID, f.Task):
		return false
	}
	if f.RewardMin != "" || f.RewardMax != "" {
		if math.IsNaN(s.Reward) || s.Reward < f.rewardMin || s.Reward > f.rewardMax {
			return false
		}
	}
	if f.Tag != "" {
		v, ok := s.Tag(f.tagKey)
		if !ok || f.tagHasValue && v != f.tagValue {
			return false
		}
	}
	return true
}

// apply returns the indices of the matching episodes in the filter's order.
func (f *Filter) apply(eps []Summary) []int {
	out := make([]int, 0, len(eps))
	for i := range eps {
		if f.match(&eps[i]) {
			out = append(out, i)
		}
	}
	// NaN rewards (unscored) sort last either way.
	byReward := func(a, b int) int {
		ra, rb := eps[a].Reward, eps[b].Reward
		switch {
		case math.IsNaN(ra) && math.IsNaN(rb):
			return cmp.Compare(a, b)
		case math.IsNaN(ra):
			return 1
		case math.IsNaN(rb):
			return -1
		}
		return 0
	}
	switch f.Sort {
	case "reward", "-reward":
		sign := 1
		if f.Sort[0] == '-' {
			sign = -1
		}
		slices.SortStableFunc(out, func(a, b int) int {
			if c := byReward(a, b); c != 0 || math.IsNaN(eps[a].Reward) || math.IsNaN(eps[b].Reward) {
				return c
			}
			return sign * cmp.Compare(eps[a].Reward, eps[b].Reward)
		})
	case "questions":
		slices.SortStableFunc(out, func(a, b int) int { return cmp.Compare(eps[a].Questions, eps[b].Questions) })
	case "-questions":
		slices.SortStableFunc(out, func(a, b int) int { return cmp.Compare(eps[b].Questions, eps[a].Questions) })
	case "task":
		slices.SortStableFunc(out, func(a, b int) int { return strings.Compare(eps[a].TaskID, eps[b].TaskID) })
	}
	return out
}

// query is the filter as GET parameters (page excluded), for links that
// keep it.
func (f *Filter) query() url.Values {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("protocol", f.Protocol)
	set("status", f.Status)
	set("task", f.Task)
	set("tag", f.Tag)
	set("condition", f.Condition)
	set("oracle", f.Oracle)
	set("rmin", f.RewardMin)
	set("rmax", f.RewardMax)
	set("sort", f.Sort)
	if f.NoQuestions {
		q.Set("noq", "1")
	}
	if f.ErrorsOnly {
		q.Set("errors", "1")
	}
	return q
}

// pageLink is one link of a pager.
type pageLink struct {
	Label   string
	URL     string
	Current bool
	Gap     bool
}

// pager links the first, last and nearby pages of pages, keeping q.
func pager(base string, q url.Values, param string, page, pages int) []pageLink {
	if pages <= 1 {
		return nil
	}
	link := func(p int, label string) pageLink {
		qq := url.Values{}
		for k, v := range q {
			qq[k] = v
		}
		if p > 1 {
			qq.Set(param, strconv.Itoa(p))
		} else {
			qq.Del(param)
		}
		u := base
		if enc := qq.Encode(); enc != "" {
			u += "?" + enc
		}
		return pageLink{Label: label, URL: u, Current: p == page && label == strconv.Itoa(p)}
	}
	var out []pageLink
	if page > 1 {
		out = append(out, link(page-1, "‹ prev"))
	}
	last := 0
	for p := 1; p <= pages; p++ {
		if p == 1 || p == pages || p >= page-3 && p <= page+3 {
			if last != 0 && p > last+1 {
				out = append(out, pageLink{Label: "…", Gap: true})
			}
			out = append(out, link(p, strconv.Itoa(p)))
			last = p
		}
	}
	if page < pages {
		out = append(out, link(page+1, "next ›"))
	}
	return out
}
