//! A `train` run shared by the ranks of an MPI job (`torchlean_train::data_parallel`): the
//! world it runs in, and how a failure on one rank ends every rank.

use crate::args::TrainArgs;
use crate::{report, BadInput, Outcome, Stop};
use torchlean_train::{Start, World};

/// The world of a `train` run: over MPI when a launcher started this process as one of
/// several, or with `--distributed`; else a world of one.
pub fn world(a: &TrainArgs) -> Result<World, BadInput> {
    let how = if a.distributed {
        Start::Required
    } else {
        Start::Auto
    };
    World::start(how).map_err(|e| BadInput::one(crate::chain(&e)))
}

/// " on N ranks" for a run's header line; nothing in a world of one.
pub fn on_ranks(world: &World) -> String {
    match world.size() {
        1 => String::new(),
        n => format!(" on {n} ranks"),
    }
}

/// What a rank does with its run's `result`. In a world of one, nothing: `result` is the
/// command's. On several ranks, a failure is this rank's alone (the others may be waiting in a
/// collective for it), so this rank prints it, naming itself, and ends the whole job with the
/// status the command would have had (`MPI_Abort`); no rank is left waiting. A failure every
/// rank finds at once (the ranks' parameters diverged) is each rank's own `Outcome::Failed`,
/// printed by rank 0.
pub fn settle(world: &World, result: Result<Outcome, Stop>) -> Result<Outcome, Stop> {
    if world.size() == 1 {
        return result;
    }
    let stop = match result {
        Ok(Outcome::Failed) | Ok(Outcome::Ok) | Ok(Outcome::Interrupted) => return result,
        Err(stop) => stop,
    };
    let named = match stop {
        Stop::BadInput(BadInput(lines)) => Stop::BadInput(BadInput(
            lines
                .into_iter()
                .map(|l| format!("rank {} of {}: {l}", world.rank(), world.size()))
                .collect(),
        )),
        other => other,
    };
    let code = report(Err(named));
    world.abort(i32::from(code))
}
