"""The campaign-bot webhook service: GitHub deliveries in, evidence checks, GitHub writes out."""
