//! creator-etl: extract a creator-marketing service's data, shape it for analysts, and replay
//! reviewed corrections.
//!
//! The layers, bottom to top; a module uses only its own layer and those below (the test
//! `tests/it/architecture.rs` holds the table and checks every `crate::` path):
//!
//! 1. [`api`] (client and models) and the shared utilities: [`out`], [`progress`], [`exit`],
//!    [`stop`];
//! 2. the stages: [`extract`] → [`transform`] → [`load`], and [`action`]; the [`emulator`] uses
//!    only [`api`] (its models and the service's documented limits);
//! 3. [`query`];
//! 4. [`sync`]: one organization's sync, and the crate's [`Error`];
//! 5. [`fleet`] and [`demo`], which call [`sync`], and [`report`], the HTML page of what the
//!    data holds (it reads the fleet's status files);
//! 6. [`commands`]: one file per subcommand, arguments → config → library → print;
//! 7. [`cli`] and `main.rs`: parse, set up logging, dispatch, map the result to an exit code;
//!    [`manual`], the manual's reference pages generated from [`cli`] and the table catalog.

pub mod action;
pub mod api;
pub mod cli;
pub mod commands;
pub mod demo;
pub mod emulator;
mod error;
pub mod exit;
pub mod extract;
pub mod fleet;
pub mod load;
pub mod manual;
pub mod out;
pub mod progress;
pub mod query;
pub mod report;
pub mod stop;
pub mod sync;
#[cfg(test)]
mod testing;
pub mod transform;

pub use error::Error;
