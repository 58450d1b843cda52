"""The playground: a Panel application that shows a small transformer's forward pass as it happens."""
