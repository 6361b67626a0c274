//! A controller's flag group and the settings it makes of them, as the registry
//! carries them: `run`'s command line gathers every registered controller's group,
//! and each group turns its flags into its controller's settings, so a new
//! controller brings its flags without an edit to the command line or to the
//! options the runtime passes around.

use std::any::{Any, TypeId};
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use clap::{ArgMatches, Args, FromArgMatches};
use svcplane_allocator::AllocatorConfig;

/// What a controller's settings may draw on besides the flags: values the whole
/// process shares.
#[derive(Debug, Clone)]
pub struct Shared {
    /// The allocator's ranges (`--service-cluster-ip-range`, `--service-node-port-range`).
    pub allocator: AllocatorConfig,
    /// Whether the ClusterIP ranges follow the cluster's ServiceCIDR objects.
    pub follow_service_cidrs: bool,
    /// The process' random seed.
    pub seed: u64,
}

/// A controller's flags, in kube-controller-manager's shape (each controller owns
/// its options): a `#[derive(clap::Args)]` struct in the controller's shell file.
pub trait FlagGroup: Args + FromArgMatches {
    /// The controller's settings.
    type Config: Clone + fmt::Debug + Send + Sync + 'static;

    /// The settings these flags ask for. `all` is the whole command line, for the few
    /// flags one controller reads from another's group (a batch period that defaults
    /// to the Endpoints controller's).
    fn config(&self, all: &ArgMatches, shared: &Shared) -> Result<Self::Config, clap::Error>;
}

/// `--endpoint-updates-batch-period`'s id: the Endpoints controller's flag, the
/// default of the EndpointSlice and mirroring controllers' batch periods.
pub(crate) const ENDPOINT_UPDATES_BATCH_PERIOD: &str = "endpoint_updates_batch_period";

/// `--write-coalescing-window`'s id: the EndpointSlice controller's flag, which the
/// Endpoints controller's queue follows too.
pub(crate) const WRITE_COALESCING_WINDOW: &str = "write_coalescing_window";

/// The duration flag `id` another controller's group declares (with a default, so it
/// is always set).
pub(crate) fn duration_of(all: &ArgMatches, id: &str) -> Result<Duration, clap::Error> {
    match all.try_get_one::<Duration>(id) {
        Ok(Some(d)) => Ok(*d),
        Ok(None) => Err(clap::Error::raw(
            clap::error::ErrorKind::MissingRequiredArgument,
            format!("flag {id} is not on the command line"),
        )),
        Err(e) => Err(clap::Error::raw(
            clap::error::ErrorKind::InvalidValue,
            e.to_string(),
        )),
    }
}

/// One controller's settings behind a type-erased box, clonable.
trait Setting: Any + fmt::Debug + Send + Sync {
    fn clone_box(&self) -> Box<dyn Setting>;
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<T: Clone + fmt::Debug + Send + Sync + 'static> Setting for T {
    fn clone_box(&self) -> Box<dyn Setting> {
        Box::new(self.clone())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// Every controller's settings, by the type of its settings (each controller has
/// its own `Config` type).
#[derive(Debug, Default)]
pub struct Settings(BTreeMap<TypeId, Box<dyn Setting>>);

impl Clone for Settings {
    fn clone(&self) -> Self {
        Self(
            self.0
                .iter()
                .map(|(k, v)| (*k, (**v).clone_box()))
                .collect(),
        )
    }
}

impl Settings {
    /// Adds the settings `group` makes of the command line `all`.
    pub fn insert<F: FlagGroup>(
        &mut self,
        all: &ArgMatches,
        shared: &Shared,
    ) -> Result<(), clap::Error> {
        let config = F::from_arg_matches(all)?.config(all, shared)?;
        self.0.insert(TypeId::of::<F::Config>(), Box::new(config));
        Ok(())
    }

    /// The settings of type `T`, if a group made them.
    pub fn get<T: 'static>(&self) -> Option<&T> {
        let setting: &dyn Setting = self.0.get(&TypeId::of::<T>())?.as_ref();
        setting.as_any().downcast_ref()
    }

    /// The same, to change (tests and the simulator tune what no flag reaches).
    pub fn get_mut<T: 'static>(&mut self) -> Option<&mut T> {
        let setting: &mut dyn Setting = self.0.get_mut(&TypeId::of::<T>())?.as_mut();
        setting.as_any_mut().downcast_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Command;

    #[derive(Debug, Clone, clap::Args)]
    struct ToyFlags {
        #[arg(long, default_value_t = 3)]
        toy_workers: u16,
    }

    #[derive(Debug, Clone, PartialEq)]
    struct ToyConfig {
        workers: usize,
        seed: u64,
    }

    impl FlagGroup for ToyFlags {
        type Config = ToyConfig;

        fn config(&self, _all: &ArgMatches, shared: &Shared) -> Result<ToyConfig, clap::Error> {
            Ok(ToyConfig {
                workers: usize::from(self.toy_workers),
                seed: shared.seed,
            })
        }
    }

    /// A group's settings are found by their type, and change in place.
    #[test]
    fn settings_are_made_by_the_group_and_found_by_type() {
        let cmd = ToyFlags::augment_args(Command::new("t"));
        let all = cmd.get_matches_from(["t", "--toy-workers", "7"]);
        let shared = Shared {
            allocator: AllocatorConfig::from_flags("10.96.0.0/12", "30000-32767").unwrap(),
            follow_service_cidrs: true,
            seed: 9,
        };
        let mut settings = Settings::default();
        settings.insert::<ToyFlags>(&all, &shared).unwrap();
        assert_eq!(
            settings.get::<ToyConfig>(),
            Some(&ToyConfig {
                workers: 7,
                seed: 9
            })
        );
        settings.get_mut::<ToyConfig>().unwrap().workers = 1;
        let copy = settings.clone();
        assert_eq!(copy.get::<ToyConfig>().map(|c| c.workers), Some(1));
        assert_eq!(settings.get::<u32>(), None);
    }
}
