"""Tier table, the Dramatiq broker and the middleware stack. Knows no business."""
