package env

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	"avtgym/env/internal/statepb"
	pb "avtgym/proto/avtgym/v1"
)

// The episode state is encoded and decoded on every step, which made the
// reflection-based protobuf codec one of the largest costs of a step (see
// bench/RESULTS.md). These functions produce and read the same wire format
// as proto.Marshal and proto.Unmarshal of statepb.EpisodeState (a test
// checks both directions), field by field, without reflection. A field
// added to state.proto must be added here too; the round-trip test fails
// until it is.
//
// Strings are not checked for valid UTF-8 on decoding: tokens are
// authenticated, so their content was encoded by this code from validated
// input.

func appendState(b []byte, st *statepb.EpisodeState) []byte {
	b = appendVarint(b, 1, uint64(st.Version))
	b = appendString(b, 2, st.Corpus)
	b = appendString(b, 3, st.RecordId)
	b = appendString(b, 4, string(st.RecordHash))
	b = appendVarint(b, 5, st.Seed)
	b = appendVarint(b, 6, uint64(int64(st.GroupIndex)))
	b = appendVarint(b, 7, uint64(int64(st.Reward)))
	b = appendVarint(b, 8, uint64(int64(st.Solver)))
	b = appendVarint(b, 9, uint64(int64(st.Oracle)))
	b = appendVarint(b, 10, uint64(int64(st.Budget)))
	b = appendVarint(b, 11, uint64(int64(st.Phase)))
	b = appendVarint(b, 12, uint64(int64(st.Status)))
	for _, q := range st.Questions {
		size := 0
		if q.Question != "" {
			size += protowire.SizeTag(1) + protowire.SizeBytes(len(q.Question))
		}
		if q.Reply != "" {
			size += protowire.SizeTag(2) + protowire.SizeBytes(len(q.Reply))
		}
		if q.CreditMask != nil {
			size += protowire.SizeTag(3) + protowire.SizeFixed64()
		}
		b = protowire.AppendTag(b, 13, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(size))
		b = appendString(b, 1, q.Question)
		b = appendString(b, 2, q.Reply)
		if q.CreditMask != nil {
			b = protowire.AppendTag(b, 3, protowire.Fixed64Type)
			b = protowire.AppendFixed64(b, *q.CreditMask)
		}
	}
	b = appendVarint(b, 14, uint64(int64(st.Attempted)))
	b = appendString(b, 15, st.SolutionSql)
	b = appendBool(b, 16, st.Verified)
	b = appendBool(b, 17, st.Outcome)
	b = appendString(b, 18, st.VerifierReason)
	b = appendVarint(b, 19, uint64(st.IssuedUnix))
	return b
}

// appendVarint, appendString and appendBool follow proto3: zero values are
// not written.
func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendBool(b []byte, num protowire.Number, v bool) []byte {
	if !v {
		return b
	}
	return appendVarint(b, num, 1)
}

var errStateWire = errors.New("malformed episode state")

// readState decodes an episode state. Unknown fields are skipped, as
// proto.Unmarshal does.
func readState(b []byte, st *statepb.EpisodeState) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errStateWire
		}
		b = b[n:]
		switch {
		case typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return errStateWire
			}
			b = b[n:]
			setVarint(st, num, v)
		case typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return errStateWire
			}
			b = b[n:]
			if err := setBytes(st, num, v); err != nil {
				return err
			}
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return errStateWire
			}
			b = b[n:]
		}
	}
	return nil
}

func setVarint(st *statepb.EpisodeState, num protowire.Number, v uint64) {
	switch num {
	case 1:
		st.Version = uint32(v)
	case 5:
		st.Seed = v
	case 6:
		st.GroupIndex = int32(v)
	case 7:
		st.Reward = pb.RewardType(int32(v))
	case 8:
		st.Solver = pb.Solver(int32(v))
	case 9:
		st.Oracle = pb.OracleType(int32(v))
	case 10:
		st.Budget = int32(v)
	case 11:
		st.Phase = pb.Phase(int32(v))
	case 12:
		st.Status = pb.EpisodeStatus(int32(v))
	case 14:
		st.Attempted = int32(v)
	case 16:
		st.Verified = v != 0
	case 17:
		st.Outcome = v != 0
	case 19:
		st.IssuedUnix = int64(v)
	}
}

func setBytes(st *statepb.EpisodeState, num protowire.Number, v []byte) error {
	switch num {
	case 2:
		st.Corpus = string(v)
	case 3:
		st.RecordId = string(v)
	case 4:
		st.RecordHash = append([]byte(nil), v...)
	case 13:
		q, err := readQuestion(v)
		if err != nil {
			return err
		}
		st.Questions = append(st.Questions, q)
	case 15:
		st.SolutionSql = string(v)
	case 18:
		st.VerifierReason = string(v)
	}
	return nil
}

func readQuestion(b []byte) (*statepb.AnsweredQuestion, error) {
	q := &statepb.AnsweredQuestion{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, errStateWire
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.BytesType, num == 2 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, errStateWire
			}
			b = b[n:]
			if num == 1 {
				q.Question = string(v)
			} else {
				q.Reply = string(v)
			}
		case num == 3 && typ == protowire.Fixed64Type:
			v, n := protowire.ConsumeFixed64(b)
			if n < 0 {
				return nil, errStateWire
			}
			b = b[n:]
			q.CreditMask = &v
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return nil, fmt.Errorf("%w: question field %d", errStateWire, num)
			}
			b = b[n:]
		}
	}
	return q, nil
}
