"""The user's day in headless Chromium: alice logs in, starts JupyterLab, opens the dashboard, submits a tiny
training job from its form, watches it run on the job page, is told when it ends (a browser notification and an
e-mail), and sees its throughput and AUROC charts in the embedded TensorBoard. Then she turns job e-mail off for
herself. Screenshots go to tests/artifacts/dashboard-*.png (dashboard-5: the finished job's whole page).

Sized for 2 CPU cores: the demo set (64x64 images), 1 epoch, batch 8, one worker on one (fake) GPU.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from portal import jobs
from portal.config import load
from portal.jobs.demo_data import ensure_demo_data
from portal.records.record import ENDED_STATES
from tests.browser.conftest import (
    PORTAL,
    RECORD_NOTIFICATIONS,
    RECORD_VIOLATIONS,
    log_in,
    new_context,
    wait_for_job_state,
)
from tests.conftest import (
    CLUSTER,
    JOB_END_GRACE_S,
    SERVER_START_S,
    TINY_MODEL,
    Mailbox,
    as_user,
    end_job,
    job_wait_s,
    logged_since,
    scratch_dir,
    user_settings_cleared,
    wait_for,
)

pytestmark = pytest.mark.integration
FORM = {"gpus_per_node": "1", "cpus_per_task": "1", "memory_gb": "4", "epochs": "1", "batch_size": "8",
        "image_size": "64", "time_limit": "00:20:00"}
# The job starts at once on the idle test box (its nodes are free), and ends within its own time limit.
JOB_WAIT_S = job_wait_s(FORM["time_limit"])
FIGURES_WAIT_S = 60  # after the job ended, as tests/integration/test_dashboard.py gives the API
MAIL_LOG_WAIT_S = 60  # MailProg logs a message it sent after the MTA has taken (and may have delivered) it
CHARTS = ("throughput/images_per_sec", "auroc/mean")
# A job that fails at once (the form's data_dir is an empty directory), for what happens at a job's end.
FAILING_FORM = {"gpus_per_node": "0", "cpus_per_task": "1", "memory_gb": "2", "epochs": "1", "image_size": "64",
                "time_limit": "00:05:00"}


@pytest.fixture
def alice_in_lab(hub, admin, cluster, page):
    """alice logged in, with her JupyterLab server running (no GPU): TensorBoard lives in it."""
    ensure_demo_data(cluster)
    user_settings_cleared("alice")  # a newcomer's defaults: e-mail at a job's end on
    log_in(page, hub, "alice", "wonderland")
    page.wait_for_url("**/hub/spawn**")
    page.fill("input[name=gpus]", "0")
    page.click("form input[type=submit], form button[type=submit]")
    page.wait_for_url("**/user/alice/lab**", timeout=SERVER_START_S * 1000)
    submitted = []
    yield page, submitted
    for job_id in submitted:
        end_job(job_id)
    if hub.server(admin, "alice") is not None:
        hub.stop(admin, "alice")


def test_alice_submits_from_the_dashboard_watches_it_run_and_sees_its_tensorboard(hub, alice_in_lab, artifacts):
    page, submitted = alice_in_lab
    page.context.add_init_script(RECORD_NOTIFICATIONS)
    page.context.add_init_script(RECORD_VIOLATIONS)
    fonts = []  # what TensorBoard's page asks for its fonts, and what it gets
    page.on("response", lambda r: fonts.append((r.url, r.status)) if "font-roboto" in r.url else None)
    page.goto(f"{hub.url}/services/portal/")
    page.wait_for_url("**/services/portal/jobs")
    assert page.locator("nav").get_by_text("alice").count() == 1
    # She asks to be told when a job ends (the browser is asked on her click, never on a page load).
    assert page.evaluate("() => window.__asked()") == 0
    page.click("#notify-toggle")
    page.wait_for_function("() => document.getElementById('notify-toggle')?.getAttribute('aria-pressed') === 'true'")

    page.click("nav >> text=Submit")
    page.wait_for_selector("#submit_form")
    # Before anything is typed, every field shows the value a submit would use, and one line sums them up.
    shown = dict(page.eval_on_selector_all("#submit_form input[name]:not([type=hidden]):not([type=checkbox]), "
                                           "#submit_form select", "fields => fields.filter(f => f.offsetParent !== "
                                           "null && f.type !== 'radio').map(f => [f.name, f.value])"))
    assert set(shown) >= {"template", "model", "nodes", "memory_gb", "time_limit", "data_dir"}, shown
    assert all(shown.values()), shown
    # "Single run" is chosen: the sweep's fields are hidden until "Sweep" is (and then every one is labelled).
    assert page.is_checked("#kind-single") and page.is_hidden("#sweep-fields")
    page.check("#kind-sweep")
    assert page.is_visible("#sweep_trials") and page.input_value("#sweep_trials") == "8"
    page.check("#kind-single")
    assert page.is_hidden("#sweep-fields")
    assert page.is_checked("#submit_form #mail")  # e-mail at its end: her default, shown
    assert page.text_content("#request-summary").startswith(
        f"{shown['nodes']} node x {shown['gpus_per_node']} GPU, "), page.text_content("#request-summary")
    page.screenshot(path=str(artifacts / "dashboard-0-submit-form-defaults.png"), full_page=True)
    for name, value in FORM.items():
        page.fill(f"#submit_form input[name={name}]", value)
    assert page.text_content("#request-summary").endswith(
        "at most 20 min, so at most 0.33 GPU-hours; 1 of your 4 GPUs"), page.text_content("#request-summary")
    # portal.js follows the fields
    page.screenshot(path=str(artifacts / "dashboard-1-submit-form.png"), full_page=True)
    # The form as shown (docs/screenshots); the job trains tinycnn: this tests the portal, not the model.
    page.select_option("#submit_form select[name=model]", TINY_MODEL)
    mailbox = Mailbox("alice")
    page.click("#submit_form button[type=submit]")
    page.wait_for_url(re.compile(r".*/services/portal/jobs/\d+$"))
    job_id = page.url.rsplit("/", 1)[1]
    submitted.append(job_id)
    page.screenshot(path=str(artifacts / "dashboard-2-job-submitted.png"), full_page=True)

    # The page follows the job by itself (it reloads when the state changes); no clicks from here on.
    wait_for_job_state(page, {"RUNNING"} | ENDED_STATES, JOB_WAIT_S)
    page.screenshot(path=str(artifacts / "dashboard-3-job-running.png"), full_page=True)
    state = wait_for_job_state(page, ENDED_STATES, JOB_WAIT_S)
    assert state == "COMPLETED", f"job {job_id} ended {state}: {page.text_content('main')[:2000]}"
    # The open page told her, once, naming the job, its state and its best mean AUROC.
    page.wait_for_function(f"() => (window.__notes?.() ?? []).some(n => n.tag === 'dsportal-job-{job_id}')",
                           timeout=FIGURES_WAIT_S * 1000)
    (note,) = [n for n in page.evaluate("() => window.__notes()") if n["tag"] == f"dsportal-job-{job_id}"]
    assert note["title"] == f"Job {job_id} COMPLETED" and "mean AUROC" in note["body"], note

    def final_figures():  # read from the job's event files; the page of an ended job does not refresh itself
        page.reload()
        shown = [page.text_content(f"#{name}").strip() for name in ("epochs_done", "images_per_sec", "best_mean_auroc")]
        return shown if all(re.fullmatch(r"\d+(\.\d+)?", figure) for figure in shown) else None
    epochs, images_per_sec, auroc = wait_for(final_figures, FIGURES_WAIT_S, interval=3, what="the final figures")
    assert epochs == "1" and float(images_per_sec) > 0 and 0 <= float(auroc) <= 1, (epochs, images_per_sec, auroc)
    # ...and so did an e-mail in her mailbox of the box (Slurm's MailProg, the box's exim4), with the same AUROC.
    (mail,) = wait_for(lambda: mailbox.about(job_id), FIGURES_WAIT_S, interval=2, what=f"job {job_id}'s e-mail")
    assert mail["Subject"] == f"Job {job_id} COMPLETED: best mean AUROC {float(auroc):.3f}", mail["Subject"]
    assert mail["To"] == "alice@dsportal.local" and f"/services/portal/jobs/{job_id}" in mail.get_content()
    assert "Start your server" not in page.content()

    # TensorBoard's time-series view, narrowed by the panel's URL to this job's run and its two charts; each
    # chart card is titled by its tag and lists the run's latest value.
    frame = page.frame_locator("iframe.tensorboard")
    try:
        for tag in CHARTS:
            frame.locator("card-view", has_text=tag).filter(has_text=f"{CLUSTER}/{job_id}/tensorboard").wait_for(
                timeout=90_000)
    finally:
        page.locator("iframe.tensorboard").scroll_into_view_if_needed()
        page.screenshot(path=str(artifacts / "dashboard-4-tensorboard.png"))
    # Not loss/*, not the per-class AUROC charts (TensorBoard keeps other groups' cards in the page, hidden).
    expect(frame.locator("card-view:visible")).to_have_count(len(CHARTS))
    runs = frame.locator("tb-data-table-content-row[data-id]")
    expect(runs.first).to_be_attached()
    listed = [runs.nth(i).get_attribute("data-id") for i in range(runs.count())]
    assert listed == [f"defaultExperimentId/{CLUSTER}/{job_id}/tensorboard"], listed  # not her other jobs
    # Its fonts come from TensorBoard's own path, not the site's root (the hub's 404s, before).
    assert fonts and all(status in (200, 304) and "/user/alice/tensorboard/font-roboto/" in url
                         for url, status in fonts), \
        fonts
    page.screenshot(path=str(artifacts / "dashboard-5-job-completed.png"), full_page=True)
    # The job page framed TensorBoard (the site's own, /user/alice/) under its nonce policy: nothing was refused.
    assert page.evaluate("() => window.__violations") == [], page.evaluate("() => window.__violations")


def test_alice_turns_job_email_off_for_herself_on_the_submit_page(hub, browser, alice_cookies, artifacts):
    user_settings_cleared("alice")
    empty_dir = str(scratch_dir("alice") / "mail-off-empty-data")
    as_user("alice", "mkdir", "-p", "--", empty_dir)
    context = new_context(browser, storage_state=alice_cookies)
    try:
        page = context.new_page()
        page.goto(f"{hub.url}/{PORTAL}submit")
        assert page.is_checked("#submit_form #mail") and page.is_checked("#settings_form #job_mail")
        page.uncheck("#settings_form #job_mail")
        page.click("#settings_form button[type=submit]")
        page.wait_for_url("**/submit?saved=1")
        said = " ".join(page.text_content("#settings-saved").split())
        assert said == 'Saved: new jobs start with "E-mail me when it ends" unticked.', said
        # Her default is what the form starts with now, and what a submit that does not say gets (the API's too).
        assert not page.is_checked("#submit_form #mail") and not page.is_checked("#settings_form #job_mail")
        page.screenshot(path=str(artifacts / "dashboard-settings-mail-off.png"), full_page=True)
        answer = page.evaluate(f"""() => fetch('{hub.url}/{PORTAL}api/settings',
            {{headers: {{"X-XSRFToken": window.jhdata.xsrf_token}}}}).then(r => r.json())""")  # as portal.js asks
        assert answer == {"job_mail": False, "problem": ""}, answer

        # A job she submits now (the box left as it starts) sends no e-mail when it ends. It fails at once: its
        # data directory is empty. Slurm runs MailProg within a second of a job's end, and logs each run.
        mailbox, log = Mailbox("alice"), load().slurm_conf_path.parent / "jobmail.log"
        log_start = log.stat().st_size if log.exists() else 0
        for name, value in {**FAILING_FORM, "data_dir": empty_dir}.items():
            page.fill(f"#submit_form input[name={name}]", value)
        page.click("#submit_form button[type=submit]")
        page.wait_for_url(re.compile(r".*/services/portal/jobs/\d+$"))
        job_id = page.url.rsplit("/", 1)[1]
        assert wait_for_job_state(page, ENDED_STATES, JOB_WAIT_S) == "FAILED"
        # Slurm runs MailProg for each job as it ends, in turn: a later job that asks for its e-mail, once that
        # e-mail is in, shows that MailProg had its chance at this one too (no fixed wait).
        later = jobs.submit({**{k: int(v) if v.isdigit() else v for k, v in FAILING_FORM.items()},
                             "template": "chexnet", "data_dir": empty_dir, "mail": True}, scheduler="slurm",
                            user="alice")
        later.wait(timeout=JOB_WAIT_S)
        wait_for(lambda: mailbox.about(later.id), JOB_END_GRACE_S, interval=2,
                 what=f"the e-mail about the later job {later.id} in {mailbox.path}")
        said = wait_for(lambda: logged_since(log, log_start, f"job {later.id} of alice"), MAIL_LOG_WAIT_S, interval=1,
                        what=f"MailProg's line about the later job {later.id} in {log}")
        assert f"job {job_id} of" not in said, said
        assert mailbox.about(job_id) == []
        page.screenshot(path=str(artifacts / "dashboard-settings-mail-off-job.png"), full_page=True)

        page.goto(f"{hub.url}/{PORTAL}submit")
        page.check("#settings_form #job_mail")
        page.click("#settings_form button[type=submit]")
        page.wait_for_url("**/submit?saved=1")
        assert page.is_checked("#submit_form #mail")
    finally:
        context.close()
        user_settings_cleared("alice")
        as_user("alice", "rm", "-rf", "--", empty_dir)
