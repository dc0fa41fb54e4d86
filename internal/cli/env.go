// Package cli is what draingate's commands share on the command line:
// every flag has a fallback in the environment (flag --max-wait also reads
// DRAINGATE_MAX_WAIT, the flag's name upper-cased, '-' as '_'; a flag given
// on the command line wins over its variable, and an empty variable counts
// as unset), one way to pick a subcommand (with "version" and "help"), and
// one process entry (Run).
//
// Stdlib only: the preStop agent uses it too.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"
)

// Prefix starts every variable's name.
const Prefix = "DRAINGATE_"

// Help says how flags and variables relate, for a command's usage text.
const Help = "Each flag also reads " + Prefix + "<FLAG> (upper case, '-' as '_'); a flag given on the command line wins."

// Name is the variable that stands in for the flag: "max-wait" reads
// DRAINGATE_MAX_WAIT.
func Name(flag string) string {
	return Prefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// Apply sets every flag of fs not given on the command line (call it after
// fs.Parse) from its non-empty variable, read with getenv. It tries them
// all and joins the errors; each names the variable and its value.
func Apply(fs *flag.FlagSet, getenv func(string) string) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] {
			return
		}
		name := Name(f.Name)
		v := getenv(name)
		if v == "" {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %v", name, v, err))
		}
	})
	return errors.Join(errs...)
}

// NotNegative is an error naming the setting when d is below zero, nil
// otherwise; errors.Join drops the nils of a list of checks.
func NotNegative(name string, d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("%s must not be negative, got %s", name, d)
	}
	return nil
}

// Positive is an error naming the setting when d is not above zero.
func Positive(name string, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("%s must be positive, got %s", name, d)
	}
	return nil
}
