"""How Nightshift's flows are served and deployed (schedules live in prefect.yaml)."""
