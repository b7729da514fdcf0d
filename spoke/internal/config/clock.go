package config

import (
	"time"

	"k8s.io/utils/clock"
)

// MaxClockOffset bounds --clock-offset: a clock skew test needs minutes, not
// more.
const MaxClockOffset = time.Hour

// Clock is the one clock the agent reads instants from for holds (the
// reporter's HoldRequest handling, the capacityhold and Machine
// controllers' expiry), its reports to the hub (observedAt, heartbeats,
// reported holds) and the injector's admitted-at stamps: the system clock,
// moved by ClockOffset (tests only). Durations (timers, tickers, Since) are
// those of the system clock; only the instants read are offset.
func (c *Config) Clock() clock.PassiveClock {
	if c.ClockOffset == 0 {
		return clock.RealClock{}
	}
	return offsetClock{offset: c.ClockOffset}
}

// offsetClock is the real clock, offset by a constant.
type offsetClock struct {
	clock.RealClock
	offset time.Duration
}

func (o offsetClock) Now() time.Time                  { return o.RealClock.Now().Add(o.offset) }
func (o offsetClock) Since(t time.Time) time.Duration { return o.Now().Sub(t) }
