//! A step that does not behave as expected fails with its name, and the later steps are not
//! run. Without the webhook, the bad TerraformCluster of step 1 is accepted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use captf_demo::lifecycle::{Demo, NS, STEPS};
use captf_sim::Sim;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_webhook_step_1_fails_by_name_and_nothing_else_runs() {
    let sim = Sim::start().await.unwrap();
    sim.create_namespace(NS);
    let mut demo = Demo::new(&sim, sim.client().unwrap());
    demo.echo = false;
    let rows = demo.run_script().await;
    assert_eq!(rows.len(), STEPS.len());
    assert_eq!(rows[0].step, "1 admission");
    assert!(!rows[0].ok);
    assert_eq!(rows[0].observed, "TerraformCluster/broken was accepted");
    for r in &rows[1..] {
        assert!(!r.ok);
        assert_eq!(r.observed, "not run (an earlier step failed)");
    }
}
