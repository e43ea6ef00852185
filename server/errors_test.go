package server

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"avtgym/env"
	"avtgym/internal/grpcpool"
	pb "avtgym/proto/avtgym/v1"
)

// errorInfo returns the status's ErrorInfo, failing the test without one.
func errorInfo(t *testing.T, st *status.Status) *errdetails.ErrorInfo {
	t.Helper()
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			if ei.GetDomain() != ErrorDomain {
				t.Fatalf("ErrorInfo domain %q, want %q", ei.GetDomain(), ErrorDomain)
			}
			return ei
		}
	}
	t.Fatalf("status %v has no ErrorInfo", st)
	return nil
}

// aip193Reason is AIP-193's form of an ErrorInfo reason (at most 63
// characters).
var aip193Reason = regexp.MustCompile(`^[A-Z][A-Z0-9_]+[A-Z0-9]$`)

// TestErrorReasonsAreTheEnum: every reason toStatus sends for avtgym's own
// errors is a (non-zero) value of the proto enum ErrorReason, sent by
// name; and every value of the enum is sent as its name.
func TestErrorReasonsAreTheEnum(t *testing.T) {
	for v, name := range pb.ErrorReason_name {
		if v == 0 {
			continue
		}
		if !aip193Reason.MatchString(name) || len(name) > 63 {
			t.Errorf("ErrorReason %s is not an AIP-193 reason", name)
		}
		st := toStatus(&env.Error{Code: env.InvalidArgument, Reason: pb.ErrorReason(v), Field: "f", Msg: "m"})
		if got := errorInfo(t, st).GetReason(); got != name {
			t.Errorf("ErrorReason %s is sent as %q", name, got)
		}
	}
	// Every other path of toStatus for avtgym's errors.
	for _, tc := range []struct {
		err  error
		code codes.Code
		want pb.ErrorReason
	}{
		{context.DeadlineExceeded, codes.DeadlineExceeded, pb.ErrorReason_DEADLINE_EXCEEDED},
		{fmt.Errorf("step: %w", context.Canceled), codes.Canceled, pb.ErrorReason_CANCELED},
		{errors.New("boom"), codes.Internal, pb.ErrorReason_INTERNAL},
		{fmt.Errorf("wrapped: %w", &env.Error{Code: env.NotFound, Reason: env.ReasonUnknownTask}), codes.NotFound, pb.ErrorReason_UNKNOWN_TASK},
		// Server bugs: an error without a reason, or without a code.
		{&env.Error{Code: env.InvalidArgument, Msg: "no reason"}, codes.Internal, pb.ErrorReason_INTERNAL},
		{&env.Error{Reason: env.ReasonWrongPhase, Msg: "no code"}, codes.Internal, pb.ErrorReason_WRONG_PHASE},
		{decodeError(&grpcpool.DecodeFailure{Message: "m", Err: "bad tag"}), codes.InvalidArgument, pb.ErrorReason_REQUEST_MALFORMED},
		{decodeError(&grpcpool.DecodeFailure{Message: "m", TooLarge: true, Size: 2, Limit: 1}), codes.ResourceExhausted, pb.ErrorReason_REQUEST_TOO_LARGE},
	} {
		st := toStatus(tc.err)
		got := errorInfo(t, st).GetReason()
		if st.Code() != tc.code || got != tc.want.String() {
			t.Errorf("%v: %s / %s, want %s / %s", tc.err, st.Code(), got, tc.code, tc.want)
		}
		if v, ok := pb.ErrorReason_value[got]; !ok || v == 0 {
			t.Errorf("%v: reason %q is not an ErrorReason", tc.err, got)
		}
	}
	// The one documented exception: another service's status gets its
	// code's name.
	st := toStatus(status.Error(codes.NotFound, "unknown service"))
	if got := errorInfo(t, st).GetReason(); got != "NOT_FOUND" {
		t.Errorf("health's NOT_FOUND got reason %q", got)
	}
}

// TestErrorInfoMadeInOnePlace: outside generated code and tests, the only
// place that builds a google.rpc.ErrorInfo is server/errors.go (whose
// reasons TestErrorReasonsAreTheEnum checks), and nothing converts a
// number into an ErrorReason. So every reason the server sends is a
// value of the enum.
func TestErrorInfoMadeInOnePlace(t *testing.T) {
	root := filepath.Join("..")
	fset := token.NewFileSet()
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "bin" || name == "testdata" || name == "python" || name == "third_party") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.HasSuffix(path, ".pb.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		rel, _ := filepath.Rel(root, path)
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CompositeLit:
				if sel, ok := n.Type.(*ast.SelectorExpr); ok && sel.Sel.Name == "ErrorInfo" && filepath.ToSlash(rel) != "server/errors.go" {
					t.Errorf("%s: builds an ErrorInfo outside server/errors.go", fset.Position(n.Pos()))
				}
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "ErrorReason" {
					t.Errorf("%s: converts a value into an ErrorReason; use a named value", fset.Position(n.Pos()))
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("scanned only %d files; is the walk rooted at the module?", files)
	}
}
