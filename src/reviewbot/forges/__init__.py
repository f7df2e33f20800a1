"""Forge adapters: one Forge interface, with GitHub and Gitea/Forgejo behind it."""
