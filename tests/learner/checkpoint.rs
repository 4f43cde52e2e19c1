//! burn-train's checkpointer under `PipelineStrategy`: full-model records of the merged model,
//! and a run resumed from one.

use burn::module::Module;
use burn::train::checkpoint::{Checkpointer, FileCheckpointer, KeepLastNCheckpoints};

use crate::example::{self, Mlp};
use crate::{common, launch};

#[test]
fn burns_checkpointer_saves_the_merged_model_and_a_resumed_run_ends_where_the_whole_run_does() {
    let model = common::seeded(example::SEED, |device| Mlp::new(&device.clone().autodiff()));
    let dir = common::scratch("learner-checkpoint");
    let training = || {
        example::training(dir.path(), true)
            .with_default_checkpointers()
            .with_checkpointing_strategy(KeepLastNCheckpoints::new(example::EPOCHS))
    };
    let (whole, _) = launch(training(), example::learner(model.clone()));
    assert!(whole.error.is_none(), "{:?}", whole.error);

    // Each epoch's model record is the whole trained model: the last one is the result.
    let models = FileCheckpointer::new(dir.path().join("checkpoint"), "model");
    let record = models
        .restore(example::EPOCHS)
        .expect("the last epoch's model");
    let saved = model.clone().load_record(record);
    assert_eq!(example::weights(&saved), example::weights(&whole.model));
    let record = models.restore(1).expect("the first epoch's model");
    let first = model.clone().load_record(record);
    assert_ne!(example::weights(&first), example::weights(&whole.model));

    // Resumed after epoch 2 (burn loads the model before the strategy starts): plain SGD has no
    // optimizer state, so the last epoch ends on the whole run's weights.
    let resumed = training().checkpoint(example::EPOCHS - 1);
    let (resumed, _) = launch(resumed, example::learner(model.clone()));
    assert!(resumed.error.is_none(), "{:?}", resumed.error);
    let difference = pipetrain::engine::difference(
        &example::weights(&resumed.model),
        &example::weights(&whole.model),
    );
    assert!(
        difference.max_relative <= common::TOLERANCE,
        "resumed vs whole run: {difference:?}"
    );
}
