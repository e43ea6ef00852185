package postgres

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestCloneNames: clone names fit PostgreSQL's 63 bytes whatever the
// working database's name, and give back their instance only for their
// own working database.
func TestCloneNames(t *testing.T) {
	work := DatabaseName(strings.Repeat("c", 40), strings.Repeat("d", 40), strings.Repeat("f", 64))
	n := cloneName(work, 0xdeadbeef, 123456)
	if len(n) > 63 {
		t.Fatalf("%s is %d bytes", n, len(n))
	}
	if id, ok := parseCloneName(work, n); !ok || id != 0xdeadbeef {
		t.Fatalf("parseCloneName(%s) = %x, %v", n, id, ok)
	}
	for _, other := range []string{
		cloneName(work+"x", 0xdeadbeef, 1), // another working database
		work, TemplateName(work),           // not clones
		cloneBase(work) + "deadbee_1",  // a short id
		cloneBase(work) + "deadbeef_x", // not a number
		cloneBase(work) + "zzzzzzzz_1", // not hex
	} {
		if _, ok := parseCloneName(work, other); ok {
			t.Errorf("%s parsed as a clone of %s", other, work)
		}
	}
}

// TestCloneDSN: the PyRunner's DSN names the clone, the policy role and
// its password, and the session options, whether the administrator's URL
// is a URL or a keyword/value string (which keeps its other settings).
func TestCloneDSN(t *testing.T) {
	for _, admin := range []string{
		"postgres://admin:secret@db.example:6543/postgres?sslmode=disable&user=admin",
		"host=db.example port=6543 user=admin password=secret dbname=postgres sslmode=disable",
	} {
		s := &Server{cfg: Config{AdminURL: admin, Role: "avtgym_policy"}, password: "p'a ss\\word"}
		dsn := s.cloneDSN("avtgym_x01_02_3")
		cfg, err := pgconn.ParseConfig(dsn)
		if err != nil {
			t.Fatalf("%s: %v", dsn, err)
		}
		if cfg.User != "avtgym_policy" || cfg.Password != s.password || cfg.Database != "avtgym_x01_02_3" || cfg.Host != "db.example" || cfg.Port != 6543 {
			t.Errorf("%s: user %q password %q database %q host %q port %d", dsn, cfg.User, cfg.Password, cfg.Database, cfg.Host, cfg.Port)
		}
		if o := cfg.RuntimeParams["options"]; !strings.Contains(o, "-c default_transaction_read_only=off") || !strings.Contains(o, "TimeZone=UTC") {
			t.Errorf("%s: options %q", dsn, o)
		}
		if cfg.TLSConfig != nil {
			t.Errorf("%s: sslmode=disable was lost", dsn)
		}
	}
}
