"""``appliance quickstart``: one voter, one worker and its engine on loopback from one command."""
