package tide

// The fixture helpers, for the external tests (package tide_test, which
// may import avtgym/audit: audit imports this package).
var (
	Fixture = fixture
	ByType  = byType
)
