// Package viewer serves a local web UI over episode records (eval runs,
// rollout files, episode logs), so that a researcher can filter, read,
// aggregate and compare 100k-episode runs in a browser.
//
// Records hold privileged data and the policy's adversarial text, so the
// pages are server-rendered with html/template (every record string is
// escaped; no page runs script), the default listener is loopback only,
// and requests with a non-loopback Host are refused against DNS
// rebinding.
package viewer

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

//go:embed templates/*.html static/style.css
var assets embed.FS

// Config sets how the viewer answers.
type Config struct {
	// AnyHost accepts any Host header. Without it only localhost and
	// loopback addresses are served, so that a web page in the browser
	// cannot reach the viewer by DNS rebinding; set it with
	// --insecure-listen-any, where the viewer is reached by another name.
	AnyHost bool
}

// Viewer serves a set of loaded runs.
type Viewer struct {
	runs   []*Run
	byName map[string]*Run
	cfg    Config
	tmpl   *template.Template
	css    []byte

	mu       sync.Mutex
	compared map[[2]string]*comparison // runs never change once loaded
}

// New serves runs; runs with the same name are told apart by "-2", "-3",
// ….
func New(runs []*Run, cfg Config) (*Viewer, error) {
	if len(runs) == 0 {
		return nil, errors.New("viewer: no runs")
	}
	v := &Viewer{runs: runs, byName: map[string]*Run{}, cfg: cfg, compared: map[[2]string]*comparison{}}
	for _, r := range runs {
		name := r.Name
		for k := 2; v.byName[name] != nil; k++ {
			name = fmt.Sprintf("%s-%d", r.Name, k)
		}
		r.Name = name
		v.byName[name] = r
	}
	var err error
	v.tmpl, err = template.New("").Funcs(template.FuncMap{
		"num":        fmtFloat,
		"pct":        func(x float64) string { return fmtPct(x) },
		"runURL":     runURL,
		"statsURL":   func(name string) string { return runURL(name) + "/stats" },
		"episodeURL": episodeURL,
		"protocol":   protocolLabel,
		"signed":     fmtSigned,
		"deref":      func(p *float64) float64 { return *p },
		"add":        func(a, b int) int { return a + b },
		"inc":        func(a int) int { return a + 1 },
		"sub":        func(a, b int) int { return a - b },
	}).ParseFS(assets, "templates/*.html")
	if err != nil {
		return nil, err
	}
	if v.css, err = assets.ReadFile("static/style.css"); err != nil {
		return nil, err
	}
	return v, nil
}

// Runs are the runs served, in the order given.
func (v *Viewer) Runs() []*Run { return v.runs }

// Close closes the runs' files.
func (v *Viewer) Close() error {
	var errs []error
	for _, r := range v.runs {
		errs = append(errs, r.Close())
	}
	return errors.Join(errs...)
}

func runURL(name string) string { return "/runs/" + url.PathEscape(name) }

func episodeURL(name string, n int) string { return runURL(name) + "/episodes/" + strconv.Itoa(n) }

func fmtPct(x float64) string {
	if math.IsNaN(x) {
		return "—"
	}
	return strconv.FormatFloat(100*x, 'f', 1, 64) + "%"
}

func fmtSigned(x float64) string {
	if math.IsNaN(x) {
		return "—"
	}
	s := fmtFloat(x)
	if x > 0 && s != "0" {
		s = "+" + s
	}
	return s
}

// Handler is the viewer's HTTP handler: GET pages only, with the
// security headers and the Host check on every response.
func (v *Viewer) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", v.index)
	mux.HandleFunc("GET /runs/{run}", v.list)
	mux.HandleFunc("GET /runs/{run}/stats", v.stats)
	mux.HandleFunc("GET /runs/{run}/episodes/{n}", v.episode)
	mux.HandleFunc("GET /runs/{run}/episodes/{n}/raw", v.raw)
	mux.HandleFunc("GET /compare", v.compare)
	mux.HandleFunc("GET /static/style.css", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Write(v.css)
	})
	return v.guard(mux)
}

// guard refuses what a local viewer never needs (another Host, a long
// query) and sets headers that keep record text inert: no script may
// run, no page may frame this one, nothing is cached.
func (v *Viewer) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cache-Control", "no-store")
		if !v.cfg.AnyHost && !loopbackHost(r.Host) {
			http.Error(w, "avtgym view answers only to localhost and loopback addresses (this Host header is "+strconv.Quote(r.Host)+"); start it with --insecure-listen-any to be reached by another name", http.StatusMisdirectedRequest)
			return
		}
		if len(r.URL.RawQuery) > maxQuery {
			http.Error(w, fmt.Sprintf("query longer than %d bytes", maxQuery), http.StatusRequestURITooLong)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// loopbackHost reports whether a Host header names localhost or a
// loopback IP, with or without a port.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// page is what every template gets: the title, the runs for the
// navigation, and the page's own data.
type page struct {
	Title   string
	Runs    []*Run
	Current string
	Data    any
}

func (v *Viewer) render(w http.ResponseWriter, status int, name, title, current string, data any) {
	var buf bytes.Buffer
	if err := v.tmpl.ExecuteTemplate(&buf, name, page{Title: title, Runs: v.runs, Current: current, Data: data}); err != nil {
		http.Error(w, "rendering "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

func (v *Viewer) fail(w http.ResponseWriter, status int, msg string) {
	v.render(w, status, "error.html", http.StatusText(status), "", msg)
}

func (v *Viewer) run(w http.ResponseWriter, r *http.Request) *Run {
	name := r.PathValue("run")
	run := v.byName[name]
	if run == nil {
		v.fail(w, http.StatusNotFound, fmt.Sprintf("no run named %q", name))
	}
	return run
}

// runRow is one run on the index page.
type runRow struct {
	Run *Run
	acc
}

func (v *Viewer) index(w http.ResponseWriter, r *http.Request) {
	if len(v.runs) == 1 {
		http.Redirect(w, r, runURL(v.runs[0].Name), http.StatusFound)
		return
	}
	rows := make([]runRow, len(v.runs))
	for i, run := range v.runs {
		rows[i].Run = run
		for j := range run.Episodes {
			rows[i].add(&run.Episodes[j])
		}
	}
	v.render(w, http.StatusOK, "index.html", "runs", "", rows)
}

// filterForm is what the filter form of the list and stats pages shows.
type filterForm struct {
	Action    string
	Run       *Run
	F         Filter
	Protocols []string
	Sorts     []string
	ByKeys    []string // stats: the tag keys to group by
	By        string
}

// listData is the list page's.
type listData struct {
	Run      *Run
	Filter   Filter
	Form     filterForm
	Total    int
	Matched  int
	Page     int
	Pages    int
	First    int
	Last     int
	Rows     []listRow
	Pager    []pageLink
	StatsURL string
	Stats    acc
}

type listRow struct {
	N int
	*Summary
}

func (v *Viewer) list(w http.ResponseWriter, r *http.Request) {
	run := v.run(w, r)
	if run == nil {
		return
	}
	f, err := parseFilter(r.URL.Query())
	if err != nil {
		v.fail(w, http.StatusBadRequest, err.Error())
		return
	}
	sel := f.apply(run.Episodes)
	d := listData{Run: run, Filter: f, Total: len(run.Episodes), Matched: len(sel),
		Form: filterForm{Action: runURL(run.Name), Run: run, F: f, Protocols: protocolLabels(run), Sorts: sortOrders[1:]}}
	for _, i := range sel {
		d.Stats.add(&run.Episodes[i])
	}
	d.Pages = max(1, (len(sel)+pageSize-1)/pageSize)
	d.Page = min(f.Page, d.Pages)
	lo := (d.Page - 1) * pageSize
	hi := min(lo+pageSize, len(sel))
	for _, i := range sel[lo:hi] {
		d.Rows = append(d.Rows, listRow{N: i + 1, Summary: &run.Episodes[i]})
	}
	d.First, d.Last = lo+1, hi
	q := f.query()
	d.Pager = pager(runURL(run.Name), q, "page", d.Page, d.Pages)
	q.Del("sort")
	d.StatsURL = runURL(run.Name) + "/stats"
	if enc := q.Encode(); enc != "" {
		d.StatsURL += "?" + enc
	}
	v.render(w, http.StatusOK, "list.html", run.Name, run.Name, d)
}

func (v *Viewer) episodeNumber(w http.ResponseWriter, r *http.Request, run *Run) int {
	n, err := strconv.Atoi(r.PathValue("n"))
	if err != nil || n < 1 || n > len(run.Episodes) {
		v.fail(w, http.StatusNotFound, fmt.Sprintf("run %s has episodes 1 to %d, not %q", run.Name, len(run.Episodes), r.PathValue("n")))
		return 0
	}
	return n
}

func (v *Viewer) episode(w http.ResponseWriter, r *http.Request) {
	run := v.run(w, r)
	if run == nil {
		return
	}
	n := v.episodeNumber(w, r, run)
	if n == 0 {
		return
	}
	rec, _, err := run.Record(n - 1)
	if err != nil {
		v.fail(w, http.StatusInternalServerError, err.Error())
		return
	}
	ev := buildEpisodeView(run, n, rec)
	v.render(w, http.StatusOK, "episode.html", fmt.Sprintf("%s #%d %s", run.Name, n, rec.TaskID), run.Name, ev)
}

// raw serves the record's line as JSON, as written.
func (v *Viewer) raw(w http.ResponseWriter, r *http.Request) {
	run := v.run(w, r)
	if run == nil {
		return
	}
	n := v.episodeNumber(w, r, run)
	if n == 0 {
		return
	}
	_, line, err := run.Record(n - 1)
	if err != nil {
		v.fail(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Write(append(line, '\n'))
}

// statsData is the stats page's.
type statsData struct {
	Run        *Run
	Filter     Filter
	Form       filterForm
	ListURL    string
	Matched    int
	All        acc
	By         string
	ByGroups   []*group
	Statuses   []string
	Histogram  []histBin
	Tasks      []*group
	TaskCount  int
	TaskPager  []pageLink
	TaskFirst  int
	DBs        []*group
	Conditions []*group
}

// taskPageSize is the per-task table's page.
const taskPageSize = 100

func (v *Viewer) stats(w http.ResponseWriter, r *http.Request) {
	run := v.run(w, r)
	if run == nil {
		return
	}
	q := r.URL.Query()
	f, err := parseFilter(q)
	if err != nil {
		v.fail(w, http.StatusBadRequest, err.Error())
		return
	}
	by := q.Get("by")
	if len(by) > maxParam {
		v.fail(w, http.StatusBadRequest, "parameter by is too long")
		return
	}
	if by == "" && len(run.TagKeys) > 0 {
		by = run.TagKeys[0]
		for _, k := range run.TagKeys {
			if k == "trainer/step" {
				by = k
			}
		}
	}
	tpage := 1
	if p := q.Get("tpage"); p != "" {
		if tpage, err = strconv.Atoi(p); err != nil || tpage < 1 {
			v.fail(w, http.StatusBadRequest, "tpage must be a whole number from 1")
			return
		}
		tpage = min(tpage, maxPage)
	}
	f.Sort = ""
	sel := f.apply(run.Episodes)
	d := statsData{Run: run, Filter: f, Matched: len(sel), By: by, Statuses: run.Statuses,
		Form: filterForm{Action: runURL(run.Name) + "/stats", Run: run, F: f, Protocols: protocolLabels(run), ByKeys: run.TagKeys, By: by}}
	fq := f.query()
	d.ListURL = runURL(run.Name)
	if enc := fq.Encode(); enc != "" {
		d.ListURL += "?" + enc
	}
	for _, i := range sel {
		d.All.add(&run.Episodes[i])
	}
	if by != "" {
		d.ByGroups = groupBy(run.Episodes, sel, func(s *Summary) string {
			if v, ok := s.Tag(by); ok {
				return v
			}
			return noTag
		})
		sortLabels(d.ByGroups)
	}
	d.Histogram = questionHistogram(run.Episodes, sel)
	tasks := groupBy(run.Episodes, sel, func(s *Summary) string { return s.TaskID })
	sortByReward(tasks)
	d.TaskCount = len(tasks)
	pages := max(1, (len(tasks)+taskPageSize-1)/taskPageSize)
	tpage = min(tpage, pages)
	lo := (tpage - 1) * taskPageSize
	d.Tasks = tasks[lo:min(lo+taskPageSize, len(tasks))]
	d.TaskFirst = lo + 1
	if by != "" {
		fq.Set("by", by)
	}
	d.TaskPager = pager(runURL(run.Name)+"/stats", fq, "tpage", tpage, pages)
	d.DBs = groupBy(run.Episodes, sel, func(s *Summary) string { return s.DB })
	sortLabels(d.DBs)
	d.Conditions = groupBy(run.Episodes, sel, func(s *Summary) string {
		if s.Condition == "" && s.Oracle == "" {
			return protocolLabel(s.Protocol)
		}
		return protocolLabel(s.Protocol) + " · " + s.Condition + " / " + s.Oracle
	})
	sortLabels(d.Conditions)
	v.render(w, http.StatusOK, "stats.html", run.Name+" stats", run.Name, d)
}

// protocolLabels are the run's protocols as the filter names them.
func protocolLabels(run *Run) []string {
	out := make([]string, 0, len(run.Protocols))
	for _, p := range run.Protocols {
		out = append(out, protocolLabel(p))
	}
	return out
}

// compareData is the compare page's.
type compareData struct {
	*comparison
	Resamples    int
	AName, BName string
	Rows         []taskDelta
	Pager        []pageLink
	First        int
	Page         int
	// ImprovedFirst reverses the per-task order; OrderURL flips it.
	ImprovedFirst bool
	OrderURL      string
}

func (v *Viewer) compare(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	an, bn := q.Get("a"), q.Get("b")
	if an == "" || bn == "" {
		v.fail(w, http.StatusBadRequest, "compare needs two runs: /compare?a=RUN&b=RUN")
		return
	}
	a, b := v.byName[an], v.byName[bn]
	if a == nil || b == nil {
		v.fail(w, http.StatusNotFound, fmt.Sprintf("no run named %q", map[bool]string{true: an, false: bn}[a == nil]))
		return
	}
	page := 1
	if p := q.Get("page"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 {
			v.fail(w, http.StatusBadRequest, "page must be a whole number from 1")
			return
		}
		page = min(n, maxPage)
	}
	v.mu.Lock()
	c := v.compared[[2]string{an, bn}]
	v.mu.Unlock()
	if c == nil {
		c = compareRuns(a, b)
		v.mu.Lock()
		v.compared[[2]string{an, bn}] = c
		v.mu.Unlock()
	}
	order := q.Get("order")
	if order != "" && order != "improved" {
		v.fail(w, http.StatusBadRequest, "order must be empty (regressions first) or improved")
		return
	}
	d := compareData{comparison: c, Resamples: bootstrapResamples, AName: an, BName: bn, ImprovedFirst: order == "improved"}
	pages := max(1, (len(c.Tasks)+pageSize-1)/pageSize)
	d.Page = min(page, pages)
	lo := (d.Page - 1) * pageSize
	hi := min(lo+pageSize, len(c.Tasks))
	if d.ImprovedFirst {
		for i := len(c.Tasks) - 1 - lo; i >= len(c.Tasks)-hi; i-- {
			d.Rows = append(d.Rows, c.Tasks[i])
		}
	} else {
		d.Rows = c.Tasks[lo:hi]
	}
	d.First = lo + 1
	base, flipped := url.Values{"a": {an}, "b": {bn}}, url.Values{"a": {an}, "b": {bn}}
	if d.ImprovedFirst {
		base.Set("order", "improved")
	} else {
		flipped.Set("order", "improved")
	}
	d.OrderURL = "/compare?" + flipped.Encode()
	d.Pager = pager("/compare", base, "page", d.Page, pages)
	v.render(w, http.StatusOK, "compare.html", "compare "+an+" and "+bn, "", d)
}

// CheckListen refuses a listen address that is not loopback unless
// anyAddress: the pages show privileged data (reference SQL, resolutions)
// to whoever reaches the port, and the viewer authenticates nobody.
func CheckListen(addr string, anyAddress bool) error {
	if anyAddress || loopbackListen(addr) {
		return nil
	}
	return fmt.Errorf("--listen %s: not a loopback address; the viewer shows privileged data (references, resolutions) and authenticates nobody: listen on 127.0.0.1 or [::1], or pass --insecure-listen-any to let anyone who can reach the port read the records", addr)
}

func loopbackListen(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Listen binds addr after CheckListen, and checks the bound address too
// (localhost might resolve elsewhere).
func Listen(addr string, anyAddress bool) (net.Listener, error) {
	if err := CheckListen(addr, anyAddress); err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	if tcp, ok := lis.Addr().(*net.TCPAddr); !anyAddress && (!ok || !tcp.IP.IsLoopback()) {
		lis.Close()
		return nil, CheckListen(lis.Addr().String(), false)
	}
	return lis, nil
}

// Serve answers on lis until ctx is done, then shuts down within five
// seconds. The timeouts bound what a slow or idle client holds.
func Serve(ctx context.Context, lis net.Listener, h http.Handler) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	if e := <-errc; !errors.Is(e, http.ErrServerClosed) && err == nil {
		err = e
	}
	return err
}
