"""The controller's decisions: pure functions from an object, the clock and what remote services
answered to an `Outcome` (planning.py for a BenchmarkRun, schedule.py and history_check.py for a
BenchmarkSchedule, admission.py against the admin policy of admin_policy.py). They import no kopf, no
client and no KFP API, a contract of `make lint`, so each is tested without a cluster."""
