package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Retention bounds what the store keeps: whole sessions are forgotten by
// age and by size (engram forget --retention, and engram serve every
// Interval), and the disk cap warns. Zero values are off.
type Retention struct {
	// MaxAge forgets the sessions whose last activity is older ("90d").
	MaxAge Age `toml:"max_age"`
	// MaxBytes forgets the least recently active sessions until the
	// store's content is at most this size ("10GiB").
	MaxBytes Size `toml:"max_bytes"`
	// DiskCap is the most disk the store should use: engram warns at 90 %
	// of it and past it, and keeps storing.
	DiskCap Size `toml:"disk_cap"`
	// Interval is how often engram serve applies max_age and max_bytes;
	// zero means DefaultRetentionInterval.
	Interval Duration `toml:"interval"`
}

// DefaultRetentionInterval is how often engram serve applies retention.
const DefaultRetentionInterval = time.Hour

// Every returns how often engram serve applies the policy.
func (r Retention) Every() time.Duration {
	if r.Interval.Duration == 0 {
		return DefaultRetentionInterval
	}
	return r.Interval.Duration
}

// On reports whether the policy forgets anything.
func (r Retention) On() bool { return r.MaxAge.Duration > 0 || r.MaxBytes.Bytes > 0 }

func (r Retention) validate() []error {
	var errs []error
	if r.MaxAge.Duration < 0 {
		errs = append(errs, errors.New("retention.max_age: must not be negative"))
	}
	if r.MaxBytes.Bytes < 0 || r.DiskCap.Bytes < 0 {
		errs = append(errs, errors.New("retention: sizes must not be negative"))
	}
	if r.Interval.Duration != 0 && r.Interval.Duration < time.Minute {
		errs = append(errs, errors.New("retention.interval: must be at least 1m"))
	}
	return errs
}

// Age is a time.Duration that may also be written in days or weeks
// ("90d", "2w"), as retention ages are; 0 is off.
type Age struct{ time.Duration }

// ParseAge reads an age: a Go duration ("36h"), or a number of days or
// weeks ("90d", "1.5w"), or "0".
func ParseAge(s string) (Age, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "0" {
		return Age{}, nil
	}
	for suffix, unit := range map[string]time.Duration{"d": 24 * time.Hour, "w": 7 * 24 * time.Hour} {
		if n, ok := strings.CutSuffix(s, suffix); ok {
			f, err := strconv.ParseFloat(n, 64)
			if err != nil || f < 0 || math.IsInf(f, 0) || f*float64(unit) > math.MaxInt64 {
				return Age{}, fmt.Errorf("%q is not an age: write 90d, 2w or 36h", s)
			}
			return Age{time.Duration(f * float64(unit))}, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return Age{}, fmt.Errorf("%q is not an age: write 90d, 2w or 36h", s)
	}
	return Age{d}, nil
}

// UnmarshalTOML takes an age written as a string, or 0 for none.
func (a *Age) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case int64:
		if x == 0 {
			*a = Age{}
			return nil
		}
	case string:
		age, err := ParseAge(x)
		*a = age
		return err
	}
	return fmt.Errorf("%v is not an age: write \"90d\", \"2w\" or \"36h\", or 0 for none", v)
}

// MarshalText implements encoding.TextMarshaler.
func (a Age) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// Size is a number of bytes, written as a whole number or with a unit:
// KB, MB, GB, TB are powers of 1000; K, M, G, T and KiB, MiB, GiB, TiB
// powers of 1024.
type Size struct{ Bytes int64 }

var sizeUnits = map[string]float64{
	"": 1, "b": 1,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
	"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
}

// ParseSize reads a size ("10GiB", "500 MB", "1048576").
func ParseSize(s string) (Size, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := t, ""
	if i >= 0 {
		num, unit = t[:i], strings.TrimSpace(t[i:])
	}
	mult, ok := sizeUnits[unit]
	f, err := strconv.ParseFloat(num, 64)
	if !ok || err != nil || f < 0 || f*mult > math.MaxInt64 {
		return Size{}, fmt.Errorf("%q is not a size: write 10GiB, 500MB or a number of bytes", s)
	}
	return Size{int64(f * mult)}, nil
}

// UnmarshalTOML takes a size written as a number of bytes or a string.
func (z *Size) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case int64:
		if x < 0 {
			return fmt.Errorf("%d is not a size: must not be negative", x)
		}
		z.Bytes = x
		return nil
	case string:
		v, err := ParseSize(x)
		*z = v
		return err
	}
	return fmt.Errorf("%v is not a size: write 10GiB, 500MB or a number of bytes", v)
}

// String writes a size in the largest binary unit that keeps it whole.
func (z Size) String() string {
	for _, u := range []struct {
		name string
		n    int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if z.Bytes != 0 && z.Bytes%u.n == 0 {
			return strconv.FormatInt(z.Bytes/u.n, 10) + u.name
		}
	}
	return strconv.FormatInt(z.Bytes, 10)
}
