//! The time a worker decides at, read in one place: tokio's monotonic clock (what its timers
//! run on) and the wall clock (what status times, deadlines and the seeded windows of flapping
//! nodes and pods are on). A worker reads [`Clock::now`] once per event and hands the
//! [`Now`] to its pure decisions, so tests drive it with tokio's paused clock: there the wall
//! clock follows tokio's ([`Clock::following`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use std::time::Duration;
use tokio::time::Instant;

/// One moment, on both clocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Now {
    /// The monotonic instant (timers count from it).
    pub at: Instant,
    /// The wall clock.
    pub wall: Timestamp,
}

impl Now {
    /// The wall clock as time since the Unix epoch (the windows of flapping objects are on it,
    /// so every process and every run agrees on them).
    pub fn epoch(&self) -> Duration {
        Duration::try_from(self.wall.as_duration()).unwrap_or_default()
    }

    /// The wall clock as a status time.
    pub fn time(&self) -> Time {
        Time(self.wall)
    }

    /// The wall clock as the JSON a status patch carries.
    pub fn value(&self) -> serde_json::Value {
        serde_json::to_value(self.time()).unwrap_or_default()
    }

    /// Seconds from `then` to now on the wall clock (negative when `then` is later).
    pub fn since(&self, then: Timestamp) -> f64 {
        self.wall.duration_since(then).as_secs_f64()
    }

    /// The instant of `epoch` (a wall-clock moment as time since the Unix epoch), at the
    /// earliest now.
    pub fn instant_of(&self, epoch: Duration) -> Instant {
        self.at + epoch.saturating_sub(self.epoch())
    }
}

/// Where a worker reads the time.
#[derive(Clone, Copy, Debug, Default)]
pub enum Clock {
    /// The system's wall clock beside tokio's monotonic one.
    #[default]
    System,
    /// A wall clock that starts at `wall` when tokio's clock reads `at` and follows tokio's
    /// (tests under a paused clock).
    Following { wall: Timestamp, at: Instant },
}

impl Clock {
    /// A wall clock that reads the system's now and then follows tokio's.
    pub fn following() -> Self {
        Clock::Following { wall: Timestamp::now(), at: Instant::now() }
    }

    pub fn now(&self) -> Now {
        let at = Instant::now();
        let wall = match self {
            Clock::System => Timestamp::now(),
            Clock::Following { wall, at: start } => {
                let passed = SignedDuration::try_from(at.duration_since(*start)).unwrap_or_default();
                wall.checked_add(passed).unwrap_or(*wall)
            }
        };
        Now { at, wall }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_following_wall_clock_moves_with_tokios_paused_clock() {
        let clock = Clock::following();
        let first = clock.now();
        tokio::time::sleep(Duration::from_secs(90)).await;
        let later = clock.now();
        assert_eq!(later.at - first.at, Duration::from_secs(90));
        assert_eq!(later.since(first.wall), 90.0);
        assert_eq!(later.epoch() - first.epoch(), Duration::from_secs(90));
        assert_eq!(first.instant_of(later.epoch()), later.at, "an epoch moment as an instant");
        assert_eq!(later.instant_of(first.epoch()), later.at, "a moment past is now");
    }
}
