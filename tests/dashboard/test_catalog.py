"""The job catalog pages and API: every function with its counts, failure rate and last
error, a page per function linked from the list, and bad input refused with a message."""

from __future__ import annotations

from django.test import Client
from django.urls import reverse

from tests.dashboard.sample import World, nightly_cleanup, send_welcome

API = "/admin/millrace/api/v1"
IMPORT = "tests.dashboard.sample:import_orders"
WELCOME = "tests.dashboard.sample:send_welcome"
CLEANUP = "tests.dashboard.sample:nightly_cleanup"


def test_the_api_catalog_lists_each_function_with_its_figures(viewer: Client, world: World):
    response = viewer.get(f"{API}/catalog")

    assert response.status_code == 200
    entries = {item["target"]: item for item in response.json()["items"]}
    assert entries[IMPORT]["jobsByState"]["dead"] == 1
    assert entries[IMPORT]["failureRate"] == 1.0
    assert "not a CSV file" in entries[IMPORT]["lastError"]
    assert entries[IMPORT]["lastErrorJobId"] == str(world.dead)
    assert entries[WELCOME]["jobsByState"]["succeeded"] >= 1


def test_the_api_entry_of_one_function_and_a_404_for_an_unknown_one(viewer: Client, world: World):
    found = viewer.get(f"{API}/catalog/{IMPORT}")
    missing = viewer.get(f"{API}/catalog/tests.dashboard.sample:nothing")

    assert found.status_code == 200 and found.json()["target"] == IMPORT
    assert missing.status_code == 404
    assert "nothing" in missing.json()["detail"]


def test_the_catalog_page_links_each_function_to_its_page_and_its_jobs(
    viewer: Client, world: World
):
    listed = viewer.get(reverse("millrace_dashboard:catalog")).content.decode()
    function_url = reverse("millrace_dashboard:catalog-function", args=[IMPORT])
    one = viewer.get(function_url)

    assert f'href="{function_url}"' in listed
    assert one.status_code == 200
    body = one.content.decode()
    assert "100 %" in body and "not a CSV file" in body
    assert f"/admin/millrace/jobs/?target={IMPORT.replace(':', '%3A')}&amp;state=dead" in body


def test_a_target_no_job_can_have_is_a_400_that_says_why(viewer: Client, world: World):
    too_long = "x" * 501
    api = viewer.get(f"{API}/catalog/{too_long}")
    page = viewer.get("/admin/millrace/catalog/a%00b/")

    assert api.status_code == 400 and "at most 500 characters" in api.json()["detail"]
    assert page.status_code == 400 and "NUL character" in page.content.decode()


def test_the_catalog_is_refused_to_a_visitor_without_the_view_permission(
    staff_without_permissions: Client, world: World
):
    assert staff_without_permissions.get(reverse("millrace_dashboard:catalog")).status_code == 404
    assert staff_without_permissions.get(f"{API}/catalog").status_code == 404


def test_the_jobs_list_and_the_job_page_link_to_the_catalog(viewer: Client, world: World):
    function_url = reverse("millrace_dashboard:catalog-function", args=[IMPORT])
    listed = viewer.get(reverse("millrace_dashboard:jobs"), {"target": IMPORT}).content.decode()
    job = viewer.get(reverse("millrace_dashboard:job", args=[world.dead])).content.decode()

    assert f'href="{reverse("millrace_dashboard:catalog")}"' in listed
    assert f'href="{function_url}"' in listed
    assert f'href="{function_url}"' in job


def test_run_times_of_the_last_hours_successes_are_shown_as_bucket_estimates(
    viewer: Client, world: World
):
    entry = viewer.get(f"{API}/catalog/{WELCOME}").json()
    page = viewer.get(reverse("millrace_dashboard:catalog-function", args=[WELCOME]))

    assert entry["recentRuns"] >= 1
    assert entry["runTimeP50"] is not None and entry["runTimeP95"] >= entry["runTimeP50"]
    assert "bucket estimates" in page.content.decode()
    assert 'id="mr-run-times">p50 ≤' in page.content.decode()


def test_a_tags_catalog_lists_its_functions_with_their_total(viewer: Client, world: World):
    send_welcome.using(tags=("onboarding",)).enqueue(7)
    nightly_cleanup.using(tags=("onboarding", "ops")).enqueue()

    api = viewer.get(f"{API}/catalog", {"tag": "onboarding"}).json()
    body = viewer.get(reverse("millrace_dashboard:catalog"), {"tag": "onboarding"}).content
    listed = viewer.get(reverse("millrace_dashboard:catalog")).content.decode()

    assert [item["target"] for item in api["items"]] == [CLEANUP, WELCOME]
    welcome = api["items"][1]
    assert welcome["tags"] == ["onboarding"]
    assert api["total"]["target"] == "onboarding"
    assert api["total"]["jobsByState"]["enqueued"] == sum(
        item["jobsByState"]["enqueued"] for item in api["items"]
    )
    page = body.decode()
    assert 'id="mr-catalog-total"' in page and IMPORT not in page
    assert f'href="{reverse("millrace_dashboard:catalog")}?tag=ops"' in listed


def test_a_tag_no_job_can_carry_is_a_400_that_says_why(viewer: Client, world: World):
    api = viewer.get(f"{API}/catalog", {"tag": "x" * 65})
    page = viewer.get(reverse("millrace_dashboard:catalog"), {"tag": "a b"})

    assert api.status_code == 400 and "tag" in api.json()["errors"]
    assert page.status_code == 400 and "letters, digits" in page.content.decode()
