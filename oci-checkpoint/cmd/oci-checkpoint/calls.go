package main

import (
	"flag"
	"strings"

	"github.com/urfave/cli/v2"

	"rekindle.local/oci-checkpoint/pkg/engine"
)

// callsFlag is a repeatable flag of engine calls (--quiesce, --resume):
// each occurrence is one call, whole (a JSON body may hold commas, which
// a cli.StringSliceFlag would split at), parsed by engine.ParseCall as it
// is given, so that a bad one is a usage error that quotes it.
type callsFlag struct {
	cli.GenericFlag
}

func newCallsFlag(name, usage string) *callsFlag {
	return &callsFlag{cli.GenericFlag{Name: name, Usage: usage}}
}

// Apply gives each parse of the flags a list of its own.
func (f *callsFlag) Apply(set *flag.FlagSet) error {
	f.Value = &callList{}
	return f.GenericFlag.Apply(set)
}

// callList is the calls a callsFlag was given.
type callList struct{ calls []engine.Call }

func (l *callList) Set(s string) error {
	c, err := engine.ParseCall(s)
	if err != nil {
		return err
	}
	l.calls = append(l.calls, c)
	return nil
}

func (l *callList) String() string {
	var ss []string
	for _, c := range l.calls {
		ss = append(ss, c.String())
	}
	return strings.Join(ss, "; ")
}

// calls returns the calls flag name was given, nil for none.
func calls(cc *cli.Context, name string) []engine.Call {
	if l, ok := cc.Generic(name).(*callList); ok {
		return l.calls
	}
	return nil
}
