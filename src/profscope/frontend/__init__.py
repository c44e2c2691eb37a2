"""Frontend layer: Jinja templates and static assets (no build step, no CDN)."""
