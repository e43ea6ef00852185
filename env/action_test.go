package env

import (
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	pb "avtgym/proto/avtgym/v1"
)

// TestActionKindsMatchTheOneof builds an action of every case of the
// Action oneof through reflection and checks that kindOf (the wrapper-type
// switch), actionNames and the action log's bytes agree with what
// WhichOneof reads: every case has a kind of its own, named as its field.
func TestActionKindsMatchTheOneof(t *testing.T) {
	oneof := (&pb.Action{}).ProtoReflect().Descriptor().Oneofs().ByName("kind")
	if oneof == nil {
		t.Fatal("avtgym.v1.Action has no oneof named kind")
	}
	seen := map[actionKind]bool{}
	fields := oneof.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		m := (&pb.Action{}).ProtoReflect()
		m.Set(fd, protoreflect.ValueOfMessage(m.NewField(fd).Message()))
		a := m.Interface().(*pb.Action)
		k := kindOf(a)
		if k == actionNone || seen[k] {
			t.Errorf("%s: kind %d (seen before: %v)", fd.Name(), k, seen[k])
			continue
		}
		seen[k] = true
		if got := a.ProtoReflect().WhichOneof(oneof); got.Name() != fd.Name() {
			t.Fatalf("WhichOneof reads %s, want %s", got.Name(), fd.Name())
		}
		if actionNames[k] != string(fd.Name()) {
			t.Errorf("kind %d is named %q, its field %q", k, actionNames[k], fd.Name())
		}
		if logByte(k) != byte(fd.Number()) {
			t.Errorf("%s: the action log writes %d, the field's number is %d", fd.Name(), logByte(k), fd.Number())
		}
	}
	if len(seen) != int(numActionKinds)-1 {
		t.Errorf("the oneof has %d cases, env names %d kinds", len(seen), numActionKinds-1)
	}
	if kindOf(&pb.Action{}) != actionNone || kindOf(nil) != actionNone {
		t.Error("an action without a kind is not actionNone")
	}
}

// TestCheapestBirdA: cheapestBirdA (which bounds the action log and
// decides when only a submission is left) is the cheapest paid price.
func TestCheapestBirdA(t *testing.T) {
	cheapest := int64(-1)
	for k := actionAsk; k < numActionKinds; k++ {
		if p := birdAPrices[k]; p > 0 && (cheapest < 0 || p < cheapest) {
			cheapest = p
		}
	}
	if cheapest != cheapestBirdA {
		t.Errorf("the cheapest paid action costs %d, cheapestBirdA is %d", cheapest, cheapestBirdA)
	}
}
