package env

import (
	"math"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"

	"avtgym/env/internal/statepb"
	pb "avtgym/proto/avtgym/v1"
)

func randomState(r *rand.Rand) *statepb.EpisodeState {
	str := func() string {
		if r.IntN(3) == 0 {
			return ""
		}
		b := make([]rune, r.IntN(40))
		for i := range b {
			b[i] = rune(' ' + r.IntN(500))
		}
		return string(b)
	}
	i32 := func() int32 {
		switch r.IntN(4) {
		case 0:
			return 0
		case 1:
			return -int32(r.IntN(1000)) - 1
		case 2:
			return math.MaxInt32
		}
		return int32(r.IntN(100))
	}
	st := &statepb.EpisodeState{
		Version: uint32(r.IntN(3)), Corpus: str(), RecordId: str(), Seed: r.Uint64(),
		GroupIndex: i32(), Reward: pb.RewardType(r.IntN(3)), Solver: pb.Solver(r.IntN(3)),
		Oracle: pb.OracleType(r.IntN(2)), Budget: i32(), Phase: pb.Phase(r.IntN(4)),
		Status: pb.EpisodeStatus(r.IntN(5)), Attempted: i32(), SolutionSql: str(),
		Verified: r.IntN(2) == 0, Outcome: r.IntN(2) == 0, VerifierReason: str(),
		IssuedUnix: int64(r.Uint64()),
	}
	if r.IntN(2) == 0 {
		st.RecordHash = []byte(str() + "x")
	}
	for range r.IntN(5) {
		q := &statepb.AnsweredQuestion{Question: str(), Reply: str()}
		if r.IntN(4) != 0 {
			m := r.Uint64() >> r.IntN(64)
			q.CreditMask = &m
		}
		st.Questions = append(st.Questions, q)
	}
	return st
}

// TestStateCodecMatchesProto checks the hand-written codec against the
// generated one in both directions, and that it knows every field of
// state.proto.
func TestStateCodecMatchesProto(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 5000 {
		st := randomState(r)
		mine := appendState(nil, st)
		var fromMine statepb.EpisodeState
		if err := proto.Unmarshal(mine, &fromMine); err != nil {
			t.Fatalf("case %d: proto cannot read appendState's output: %v", i, err)
		}
		if !proto.Equal(&fromMine, st) {
			t.Fatalf("case %d: appendState then proto.Unmarshal:\n got %v\nwant %v", i, &fromMine, st)
		}
		theirs, err := proto.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		var fromTheirs statepb.EpisodeState
		if err := readState(theirs, &fromTheirs); err != nil {
			t.Fatalf("case %d: readState of proto.Marshal output: %v", i, err)
		}
		if !proto.Equal(&fromTheirs, st) {
			t.Fatalf("case %d: proto.Marshal then readState:\n got %v\nwant %v", i, &fromTheirs, st)
		}
	}
	// Every field of the message is set by some case above; a field added
	// to state.proto and not to the codec makes this fail.
	fields := (&statepb.EpisodeState{}).ProtoReflect().Descriptor().Fields()
	if fields.Len() != 19 {
		t.Fatalf("EpisodeState has %d fields; the codec knows 19: update statecodec.go and this test", fields.Len())
	}
	qf := (&statepb.AnsweredQuestion{}).ProtoReflect().Descriptor().Fields()
	if qf.Len() != 3 {
		t.Fatalf("AnsweredQuestion has %d fields; the codec knows 3", qf.Len())
	}
}

func TestReadStateRejectsGarbage(t *testing.T) {
	for _, b := range [][]byte{{0xff}, {0x0a, 0x05, 'a'}, {0x6a, 0x03, 0x0a, 0x09, 'x'}} {
		var st statepb.EpisodeState
		if err := readState(b, &st); err == nil {
			t.Errorf("readState(%x) accepted malformed input", b)
		}
	}
}

func FuzzReadState(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		f.Add(appendState(nil, randomState(r)))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var mine, theirs statepb.EpisodeState
		errMine := readState(b, &mine)
		errTheirs := proto.UnmarshalOptions{}.Unmarshal(b, &theirs)
		// proto keeps unknown fields (and known fields of the wrong wire
		// type) aside; readState drops them.
		theirs.ProtoReflect().SetUnknown(nil)
		for _, q := range theirs.Questions {
			q.ProtoReflect().SetUnknown(nil)
		}
		if errMine == nil && errTheirs == nil && !proto.Equal(&mine, &theirs) {
			t.Fatalf("readState and proto.Unmarshal disagree on %x:\n%v\n%v", b, &mine, &theirs)
		}
	})
}
