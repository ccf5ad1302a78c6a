"""The services of docs/http-backend.md's recipes, as a team would run them (tests start them)."""
