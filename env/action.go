package env

import (
	"fmt"

	"google.golang.org/protobuf/reflect/protoreflect"

	pb "avtgym/proto/avtgym/v1"
)

// actionKind names the kinds of pb.Action: the cases of its oneof. Rules
// that treat kinds alike (BIRD_A's prices and action log) index tables by
// these names, never by the oneof's field numbers; actionKinds maps each
// to its oneof field, so that a renamed or added field fails at start.
type actionKind uint8

// The kinds of action.
const (
	actionNone actionKind = iota // no action set
	actionAsk
	actionStop
	actionSubmitSQL
	actionUnparsed
	actionExecute
	actionGetSchema
	actionGetAllColumnMeanings
	actionGetColumnMeaning
	actionGetAllExternalKnowledgeNames
	actionGetKnowledgeDefinition
	actionGetAllKnowledgeDefinitions
	numActionKinds
)

// actionNames are the kinds' oneof field names: how the wire, the price
// list and the clients name them.
var actionNames = [numActionKinds]string{
	actionAsk:                          "ask",
	actionStop:                         "stop",
	actionSubmitSQL:                    "submit_sql",
	actionUnparsed:                     "unparsed",
	actionExecute:                      "execute",
	actionGetSchema:                    "get_schema",
	actionGetAllColumnMeanings:         "get_all_column_meanings",
	actionGetColumnMeaning:             "get_column_meaning",
	actionGetAllExternalKnowledgeNames: "get_all_external_knowledge_names",
	actionGetKnowledgeDefinition:       "get_knowledge_definition",
	actionGetAllKnowledgeDefinitions:   "get_all_knowledge_definitions",
}

// kindOf returns the kind of a (actionNone when it sets none), from the
// generated oneof wrapper types.
func kindOf(a *pb.Action) actionKind {
	switch a.GetKind().(type) {
	case *pb.Action_Ask_:
		return actionAsk
	case *pb.Action_Stop_:
		return actionStop
	case *pb.Action_SubmitSql_:
		return actionSubmitSQL
	case *pb.Action_Unparsed_:
		return actionUnparsed
	case *pb.Action_Execute_:
		return actionExecute
	case *pb.Action_GetSchema_:
		return actionGetSchema
	case *pb.Action_GetAllColumnMeanings_:
		return actionGetAllColumnMeanings
	case *pb.Action_GetColumnMeaning_:
		return actionGetColumnMeaning
	case *pb.Action_GetAllExternalKnowledgeNames_:
		return actionGetAllExternalKnowledgeNames
	case *pb.Action_GetKnowledgeDefinition_:
		return actionGetKnowledgeDefinition
	case *pb.Action_GetAllKnowledgeDefinitions_:
		return actionGetAllKnowledgeDefinitions
	}
	return actionNone
}

// actionFields is each kind's field of the Action oneof, read from the
// descriptor by name (BIRD_A's action log keeps the field's number, one
// byte per action, as it always has).
var actionFields = func() [numActionKinds]protoreflect.FieldDescriptor {
	var out [numActionKinds]protoreflect.FieldDescriptor
	fields := (&pb.Action{}).ProtoReflect().Descriptor().Fields()
	for k := actionAsk; k < numActionKinds; k++ {
		fd := fields.ByName(protoreflect.Name(actionNames[k]))
		if fd == nil || fd.ContainingOneof() == nil || fd.Number() > 0xff {
			panic(fmt.Sprintf("env: avtgym.v1.Action has no oneof field %q of at most 255 (actionNames is stale)", actionNames[k]))
		}
		out[k] = fd
	}
	return out
}()

// logByte is kind k's entry in BIRD_A's action log: its Action field
// number.
func logByte(k actionKind) byte { return byte(actionFields[k].Number()) }
