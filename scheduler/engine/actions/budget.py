"""The reclaim / preempt search budget: how many scenarios the victim solver may simulate.

KAI's solver (:mod:`scheduler.engine.actions.solver`) tries victim scenarios one by one until one passes;
on a contended cluster a job that cannot be helped is only known to fail once every victim group has been
simulated, and the number of victim groups grows with the cluster. KAI upstream bounds that search by wall
time (``maxJobSearchDuration`` / ``maxActionSearchDuration`` of its scenario search budgets). A cycle of
this engine must stay a pure function of its inputs, so the budget here counts simulated scenarios instead:

* ``SessionConfig.solver_job_budget``: scenarios one job's attempt may simulate in vain (with
  ``solver_job_budget_counts: failed``, the default: a gang solved partial job by partial job, one
  simulation each, is not cut however many pods it has), or at all (``all``, what configs recorded before
  the field meant);
* ``SessionConfig.solver_action_budget``: scenarios one action (reclaim or preempt) may simulate *in vain*
  in a cycle -- simulations that found no solution, all its jobs together. A simulation that solves its
  job is never counted here, so an action that succeeds at once for thousands of jobs (KAI's benchmark
  shapes) is not bounded; the searches of jobs that cannot be helped are. Once it is used up, later jobs
  are not searched at all.

``None`` means no bound (a config recorded before the fields existed replays that way). A job whose search
the budget stopped gets an Unschedulable reason ``SearchBudgetExhausted`` saying so, never a silent skip.
"""

from __future__ import annotations

from scheduler.engine.session import JobInfo, Session

REASON = "SearchBudgetExhausted"


class SearchBudget:
    """One action's budget in one session (shared by all attempts of that action: see :meth:`of`)."""

    @classmethod
    def of(cls, ssn: Session, action: str) -> SearchBudget:
        """The action's budget for this session, created on first use."""
        key = f"{action}.search-budget"
        found = ssn.action_cache.get(key)
        if isinstance(found, SearchBudget):
            return found
        budget = cls(ssn, action)
        ssn.action_cache[key] = budget
        return budget

    def __init__(self, ssn: Session, action: str) -> None:
        self.ssn = ssn
        self.action = action
        self.job_limit = ssn.config.solver_job_budget
        self.action_limit = ssn.config.solver_action_budget
        self.wasted = 0  # simulations of the action in this session that found no solution
        self.job_used = 0  # simulations of the current attempt
        self.job_failed = 0  # ... that found no solution
        self.count_failed = ssn.config.solver_job_budget_counts == "failed"
        self.stopped = False  # the current attempt was cut

    def begin_job(self) -> None:
        """Start counting a new attempt."""
        self.job_used = 0
        self.job_failed = 0
        self.stopped = False

    def spent(self) -> bool:
        """Whether the action's budget for the cycle is used up (no later job may simulate anything)."""
        return self.action_limit is not None and self.wasted >= self.action_limit

    def allow(self) -> bool:
        """Whether one more scenario may be simulated; counts it if so, marks the attempt cut if not."""
        counted = self.job_failed if self.count_failed else self.job_used
        if self.spent() or (self.job_limit is not None and counted >= self.job_limit):
            self.stopped = True
            return False
        self.job_used += 1
        return True

    def failed(self) -> None:
        """Count an allowed simulation that found no solution against the action's budget."""
        self.wasted += 1
        self.job_failed += 1
        self.ssn.work[f"{self.action}.wasted"] += 1

    def explain(self, job: JobInfo) -> None:
        """Record on `job` that its search was stopped by the budget (call only when :attr:`stopped`)."""
        if self.spent():
            why = (
                f"the {self.action} action's budget of {self.action_limit} failed scenarios for this cycle "
                "(solver_action_budget) was used up"
            )
        else:
            kind = "failed scenarios" if self.count_failed else "scenarios"
            why = f"the per-job budget of {self.job_limit} {kind} (solver_job_budget) was reached"
        self.ssn.work[f"{self.action}.cut"] += 1
        job.fit_error(
            REASON,
            f"{self.action} search stopped after {self.job_used} scenarios: {why}; "
            "the job was not proven unschedulable and is tried again next cycle",
            action=self.action,
            scenarios=self.job_used,
            job_budget=self.job_limit,
            action_budget=self.action_limit,
        )

    def explain_like(self, job: JobInfo, rep: JobInfo) -> None:
        """Record on `job` that it was not searched: `rep`, of its queue, with the same scheduling signature
        and no harder, had its search cut by the budget this cycle."""
        self.ssn.work[f"{self.action}.cut"] += 1
        job.fit_error(
            REASON,
            f"{self.action} search skipped: the search for {rep.name}, of the same queue and scheduling "
            "signature and no harder, was stopped by the search budget this cycle; the job was not proven "
            "unschedulable and is tried again next cycle",
            action=self.action,
            scenarios=0,
            job_budget=self.job_limit,
            action_budget=self.action_limit,
            like=rep.uid,
        )
